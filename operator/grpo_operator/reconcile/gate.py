"""The preflight gate: the preflight Job before any GPU, its verdict into the status, the RayJob after a pass.

  begin:  the children the preflight needs (ServiceAccount, verl ConfigMap, checkpoint PVC) and the
          preflight Job of the spec as it is, status Preflight with the Job's digest;
  sync:   the Job's verdict, once it has one, read from its pod: Invalid with the failed checks, or
  start:  phase Pending written only onto the GRPOJob version that passed (a resourceVersion
          precondition: an edit that lands meanwhile is refused the write and checked afresh), which
          also freezes the spec (the CRD's frozen_once_training rules), then the RayJob.

A failed preflight creates nothing else; an edit runs it again (lifecycle: Invalid or Preflight plus a
new generation -> create), and so does deleting its Job (kubectl delete job <job>-preflight), which is
how a user re-checks files fixed on a volume.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from grpo_operator import kuberay
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, with_checkpoint_claim, with_checkpoint_size
from grpo_operator.reconcile import preflight, sizing
from grpo_operator.reconcile.children import AFTER_PREFLIGHT, Child, training_children
from grpo_operator.reconcile.common import SETTINGS, conditions_hold, create_children, parse, refuse, write_status
from grpo_operator.reconcile.compat import COMPAT, UNSUPPORTED_KUBERAY
from grpo_operator.reconcile.lifecycle import spec_digests
from grpo_operator.reconcile.status import ConditionUpdate, observe_new_rayjob
from grpo_operator.render import render_configmap, render_preflight_job, render_trainer_rbac
from grpo_operator.render.preflight_job import rendered_digest
from grpo_operator.render.verl_config import SizedKnobs
from grpo_operator.runtime import events, kube
from grpo_operator.runtimes import RUNTIME_STATUS

UNREAD: Any = object()


class Sync(enum.Enum):
    NOTHING = "nothing"  # not ours to judge (another phase, an edit pending, a stale Job)
    WAITING = "waiting"
    PASSED = "passed"
    FAILED = "failed"
    RERUN = "rerun"  # the Job of the current spec is gone: create it again


def preflight_children(spec: GRPOJobSpec, plan: Plan, gpu_memory: Mapping[str, int]) -> list[Child]:
    """What the preflight pod mounts and runs as, then the preflight Job itself (the checkpoint PVC the operator
    creates comes after it: children.AFTER_PREFLIGHT)."""
    return [
        *(Child(obj) for obj in render_trainer_rbac(spec, plan)),
        Child(render_configmap(spec, plan)),
        Child(render_preflight_job(spec, plan, gpu_memory)),
    ]


async def begin(job: dict, spec: GRPOJobSpec, plan: Plan, gpu_memory: Mapping[str, int],
                waiting: tuple[ConditionUpdate, ...] = ()) -> list[Child]:
    """Create (or keep, or replace a stale) preflight Job and say so in the status (with `waiting`: what the job
    will wait for once the preflight passed, such as nodes an autoscaler may add)."""
    meta, status = job["metadata"], job.get("status") or {}
    children = preflight_children(spec, plan, gpu_memory)
    created = await create_children(job, children)
    digest = rendered_digest(children[-1].body)
    fields = {
        "configMapName": plan.names.configmap,
        "checkpointClaimName": plan.checkpoint_claim,
        "specDigests": spec_digests(job["spec"]),
        RUNTIME_STATUS: (status or {}).get(RUNTIME_STATUS),  # the runtime create() took (runtimes.take_runtime)
    }
    if preflight.verdict_stands(status, digest, job_recreated=any(c.kind == "Job" for c in created)):
        # An edit that changed nothing the preflight checks: its verdict stands (sync reads it again).
        await kube.patch_grpojob_status(meta["namespace"], meta["name"],
                                        {"observedGeneration": meta.get("generation"), **fields})
        return created
    running = preflight.running(plan.names.preflight_job)
    accepted = ConditionUpdate("Valid", "True", "Accepted", "spec accepted; the preflight checks it before any GPU")
    await write_status(
        meta["namespace"], meta["name"], status, meta.get("generation"), "Preflight",
        (accepted, *preflight.conditions(running), *waiting),
        {**fields, "preflight": preflight.preflight_status(plan.names.preflight_job, digest, None)},
    )
    return created


async def sync(namespace: str, name: str, preflight_job: Any = UNREAD, deleted_digest: str | None = None) -> Sync:
    """Act on the preflight Job of the GRPOJob's current spec, if it has a verdict.

    `preflight_job`: the Job as its watch event delivered it (None: deleted, `deleted_digest` the digest
    it had); read when not given.
    """
    job = await kube.current_grpojob(namespace, name)
    wanted = preflight.awaited(job) if job is not None else None
    if job is None or wanted is None:
        return Sync.NOTHING
    status = job.get("status") or {}
    if preflight_job is UNREAD:
        preflight_job = await kube.get("Job", namespace, wanted["jobName"])
    if preflight_job is None:
        # Gone: run it again, unless what went was a Job of an older spec that the operator replaced.
        return Sync.RERUN if deleted_digest in (None, wanted["digest"]) else Sync.NOTHING
    if not preflight.expects(status, preflight_job, rendered_digest):
        return Sync.NOTHING
    result = preflight.outcome(preflight_job, None)
    if result.state != "running":
        message = await kube.job_termination_message(namespace, wanted["jobName"])
        result = preflight.outcome(preflight_job, message)
    if result.state == "running":
        return Sync.WAITING
    if result.state == "passed":
        await start(job, result)
        return Sync.PASSED
    await _refuse(job, result)
    return Sync.FAILED


async def _refuse(job: dict, result: preflight.Outcome) -> None:
    meta, status = job["metadata"], job.get("status") or {}
    updates = preflight.conditions(result)
    if status.get("phase") == "Invalid" and conditions_hold(status, updates):
        return  # said already (a restart, the Job's later events)
    wanted = status.get("preflight") or {}
    fields = {"preflight": preflight.preflight_status(wanted["jobName"], wanted["digest"], result)}
    await write_status(meta["namespace"], meta["name"], status, status.get("observedGeneration"), "Invalid",
                       updates, fields)
    events.warn(job, reason="PreflightFailed", message=result.message)


async def start(job: dict, result: preflight.Outcome) -> None:
    """Pending, written only onto the version whose preflight passed; then the RayJob."""
    meta, status = job["metadata"], job.get("status") or {}
    wanted = status.get("preflight") or {}
    starting = ConditionUpdate("Ready", "False", "RayJobMissing", "preflight passed; creating the RayJob")
    try:
        written = await write_status(
            meta["namespace"], meta["name"], status, status.get("observedGeneration"), "Pending",
            (*preflight.conditions(result), starting),
            {"preflight": preflight.preflight_status(wanted["jobName"], wanted["digest"], result)},
            resource_version=meta.get("resourceVersion"),
        )
    except kube.ApiError as exc:
        if exc.status == 409:
            return  # edited meanwhile: the edit's event runs create() on the new spec
        raise
    # Its Created Event; the Preflight condition says the rest. The verdict in hand says what was sized.
    await start_training(written, rayjob_only=True, sized=SizedKnobs.from_verdict(result.sizing))


async def start_training(job: dict, rayjob_only: bool = False, sized: SizedKnobs | Any | None = UNREAD) -> None:
    """The training children and the status fields that name them. `rayjob_only`: the preflight's
    children (ServiceAccount, ConfigMap, PVC) were created for this very spec already, so only the RayJob
    (and the NetworkPolicy that comes with it) is created. `sized`: what the passed preflight sized, read from its
    pod when not given (a resync after a restart)."""
    meta, status = job["metadata"], job.get("status") or {}
    namespace, name = meta["namespace"], meta["name"]
    spec, plan = parse(job)
    plan = with_checkpoint_size(plan, (status.get("preflight") or {}).get("checkpointClaimSize"))
    plan = await with_existing_checkpoint_claim(namespace, spec, plan)
    children = training_children(spec, plan, SETTINGS.network_policy)
    if rayjob_only:
        children = [c for c in children if c.kind in AFTER_PREFLIGHT]
    if sized is UNREAD:
        sized = await sizing.sized_knobs(namespace, status)
    children = sizing.with_sized_config(children, spec, plan, sized)
    try:
        created = await create_children(job, children)
    except kuberay.KubeRayUnsupported as exc:
        COMPAT.unsupported(exc)
        await refuse(job, UNSUPPORTED_KUBERAY, exc.message)
        raise
    sizing.say_sized(job, created, sized)
    if created:
        events.post(job, type="Normal", reason="Created",
                    message="created " + ", ".join(f"{c.kind} {c.name}" for c in created))
    initial = observe_new_rayjob(plan.names.rayjob, plan.names.namespace, plan.exports, plan.rehearsal)
    if not status.get("rayJobName"):
        await write_status(namespace, name, status, status.get("observedGeneration"),
                           initial.phase, (initial.ready,), dict(initial.fields))


async def with_existing_checkpoint_claim(namespace: str, spec: GRPOJobSpec, plan: Plan) -> Plan:
    """An existing checkpoint claim's access modes decide whether the head shares the actor's node
    (read again here: the RayJob is made after the preflight, maybe by another operator process)."""
    existing = spec.checkpoints.volume.claim_name
    if existing is None:
        return plan
    facts = await kube.claim_facts(namespace, existing)
    if facts is None:
        raise RuntimeError(f"PersistentVolumeClaim {namespace}/{existing} (spec.checkpoints.volume.claimName) is gone")
    return with_checkpoint_claim(plan, facts.access_modes)
