"""What the GRPOJob handlers and the status mirror share: the spec parsed into a plan, and status writes."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from pydantic import ValidationError

from grpo_operator import kuberay, metrics
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, plan
from grpo_operator.reconcile.children import Child, creation_waves
from grpo_operator.reconcile.status import ConditionUpdate, merge_conditions
from grpo_operator.render.preflight_job import rendered_digest
from grpo_operator.runtime import events, kube
from grpo_operator.runtimes import effective_spec
from grpo_operator.settings import OperatorSettings

SETTINGS = OperatorSettings.from_env()


def parse(job: dict) -> tuple[GRPOJobSpec, Plan]:
    """The job's effective spec (its own fields over the GRPORuntime it took, status.runtime) and its plan."""
    job_spec = effective_spec(job)
    return job_spec, plan_of(job, job_spec)


def plan_of(job: dict, job_spec: GRPOJobSpec) -> Plan:
    """The plan of the job whose effective spec is `job_spec`."""
    meta = job["metadata"]
    return plan(job_spec, name=meta["name"], namespace=meta["namespace"],
                default_image=SETTINGS.default_trainer_image, driver_floor=SETTINGS.driver_floor)


def validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"spec.{where}: {error['msg']}")
    return "; ".join(parts)


async def write_status(
    namespace: str,
    name: str,
    current: dict,
    generation: int | None,
    phase: str,
    conditions: tuple[ConditionUpdate, ...],
    fields: dict[str, Any] | None = None,
    resource_version: str | None = None,
) -> dict:
    """Phase, merged conditions and fields; with `resource_version`, only onto that version (else 409).
    Returns the GRPOJob as written."""
    status = {
        "phase": phase,
        "observedGeneration": generation,
        "conditions": merge_conditions(current.get("conditions") or [], conditions, generation),
        **(fields or {}),
    }
    written = await kube.patch_grpojob_status(namespace, name, status, resource_version)
    metrics.record_phase(namespace, name, phase)
    return written


async def refuse(job: dict, reason: str, message: str, fields: dict[str, Any] | None = None) -> None:
    """Phase Invalid with the reason; once: a job re-checked unchanged (a retry, a restart) is left as it is.
    `fields`: more status to write with it (the runtime the job took, so a refusal it causes can be traced)."""
    meta, status = job["metadata"], job.get("status") or {}
    updates = (ConditionUpdate("Ready", "False", reason, message), ConditionUpdate("Valid", "False", reason, message))
    if (
        status.get("phase") == "Invalid"
        and status.get("observedGeneration") == meta.get("generation")
        and conditions_hold(status, updates)
    ):
        return
    await write_status(meta["namespace"], meta["name"], status, meta.get("generation"), "Invalid", updates, fields)
    events.warn(job, reason=reason, message=message)



def conditions_hold(status: dict, updates: tuple[ConditionUpdate, ...]) -> bool:
    current = {c["type"]: (c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []}
    return all(current.get(u.type) == (u.status, u.reason, u.message) for u in updates)



async def create_children(owner: kopf.Body, children: list[Child]) -> list[Child]:
    """Create what is missing, wave by wave (creation_waves).

    The children of a wave do not depend on each other, so one round trip creates them. A child carrying a
    content digest (the verl ConfigMap, the preflight Job) that exists with another digest is replaced:
    this runs only before training starts, for a spec edited since.
    """
    created: list[Child] = []
    for wave in creation_waves(children):
        results = await asyncio.gather(*(_ensure(owner, c) for c in wave))
        created.extend(c for c, new in zip(wave, results, strict=True) if new)
    return created


async def _ensure(owner: kopf.Body, child: Child) -> bool:
    body = child.body
    if child.owned:
        kopf.adopt(body, owner=owner)
    else:
        body["metadata"].setdefault("namespace", owner["metadata"]["namespace"])
    try:
        if rendered_digest(body) is not None:
            return await kube.create_or_replace(body, rendered_digest) != "current"
        return await kube.create_if_absent(body)
    except kube.ApiError as exc:
        # A RayJob field the installed CRD does not have: strict validation refuses it (kuberay.py).
        refusal = kuberay.refusal_of(exc.message) if child.kind == "RayJob" and exc.status in (400, 422) else None
        if refusal is not None:
            raise kuberay.KubeRayUnsupported(refusal) from exc
        raise
