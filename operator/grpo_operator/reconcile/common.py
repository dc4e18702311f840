"""What the GRPOJob handlers and the status mirror share: the spec parsed into a plan, and status writes."""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from grpo_operator import metrics
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, plan
from grpo_operator.reconcile.status import ConditionUpdate, merge_conditions
from grpo_operator.runtime import kube
from grpo_operator.settings import OperatorSettings

SETTINGS = OperatorSettings.from_env()


def parse(name: str, namespace: str, spec: dict) -> tuple[GRPOJobSpec, Plan]:
    job_spec = GRPOJobSpec.model_validate(spec)
    return job_spec, plan(job_spec, name=name, namespace=namespace, default_image=SETTINGS.default_trainer_image)


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
) -> None:
    status = {
        "phase": phase,
        "observedGeneration": generation,
        "conditions": merge_conditions(current.get("conditions") or [], conditions, generation),
        **(fields or {}),
    }
    await kube.patch_grpojob_status(namespace, name, status)
    metrics.record_phase(namespace, name, phase)


async def refuse(job: dict, reason: str, message: str) -> None:
    """Phase Invalid with the reason; once: a job re-checked unchanged (a retry, a restart) is left as it is."""
    meta, status = job["metadata"], job.get("status") or {}
    updates = (ConditionUpdate("Ready", "False", reason, message), ConditionUpdate("Valid", "False", reason, message))
    if (
        status.get("phase") == "Invalid"
        and status.get("observedGeneration") == meta.get("generation")
        and conditions_hold(status, updates)
    ):
        return
    await write_status(meta["namespace"], meta["name"], status, meta.get("generation"), "Invalid", updates)
    kopf.warn(job, reason=reason, message=message)



def conditions_hold(status: dict, updates: tuple[ConditionUpdate, ...]) -> bool:
    current = {c["type"]: (c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []}
    return all(current.get(u.type) == (u.status, u.reason, u.message) for u in updates)

