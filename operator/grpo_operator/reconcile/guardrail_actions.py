"""Carrying out what `guardrails.decide` said: record the trip, and in act mode roll back or suspend.

A rollback is a new attempt: the RayJob is deleted (its Ray cluster goes with it; the trainer was holding,
taking no step and saving nothing), and once it is gone the same RayJob is created again with
GRPO_ROLLBACK, which makes the trainer resume from the checkpoint before the trouble with the changed
setting. The decision is written to the status first (`started: false`), so an operator restarted between
the two steps finishes the job (resync) instead of forgetting it. A suspension deletes the RayJob and sets
the GRPOJob's own spec.scheduling.suspend: the RayJob's suspend is Kueue's, never written here.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from grpo_operator import kuberay, metrics
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, PlanError
from grpo_operator.reconcile import gate
from grpo_operator.reconcile.children import Child
from grpo_operator.reconcile.common import create_children, parse, write_status
from grpo_operator.reconcile.compat import COMPAT, UNSUPPORTED_KUBERAY
from grpo_operator.reconcile.guardrails import (
    Act,
    Record,
    condition,
    decide,
    resume_after_suspension,
    rollback_entry,
    rollback_of,
)
from grpo_operator.reconcile.status import ConditionUpdate, now
from grpo_operator.render import render_rayjob
from grpo_operator.render.guardrails import KL_COEF_KEY, LEARNING_RATE_KEY, Settings, attempt_of, with_rollback
from grpo_operator.render.verl_config import verl_config
from grpo_operator.runtime import events, kube

log = logging.getLogger("grpo_operator.guardrails")
ACTIVE_PHASES = ("Pending", "Running")


def worth_a_look(job: dict) -> bool:
    """Cheap, on every event: has the trainer reported a trip the operator may not have handled yet?"""
    status = job.get("status") or {}
    if status.get("phase") not in ACTIVE_PHASES:
        return False
    section = (status.get("progress") or {}).get("guardrails")
    return isinstance(section, dict) and bool(section.get("tripped"))


def base_settings(spec: GRPOJobSpec, plan: Plan) -> Settings:
    """The learning rate and KL coefficient the job started with, the user's spec.verl overrides included."""
    config = verl_config(spec, plan)
    kl = config.get(KL_COEF_KEY) if config.get("actor_rollout_ref.actor.use_kl_loss") else None
    return Settings(float(config[LEARNING_RATE_KEY]), float(kl) if kl is not None else None)


def _parsed(job: dict) -> tuple[GRPOJobSpec, Plan] | None:
    try:
        return parse(job)
    except (ValidationError, PlanError):
        return None  # an invalid job has no RayJob to act on


async def act_on_guardrails(namespace: str, name: str) -> None:
    """Record new trips; roll back or suspend when an act-mode detector's trip asks for it."""
    job = await kube.current_grpojob(namespace, name)  # not the event's body: it may predate our last record
    if job is None or not worth_a_look(job):
        return
    parsed = _parsed(job)
    if parsed is None:
        return
    spec, plan = parsed
    status = job.get("status") or {}
    record = Record.of(status)
    decision = decide(spec.guardrails, base_settings(spec, plan), status)
    if decision.empty:
        return
    at = now()
    guardrails: dict[str, Any] = {
        "attempt": record.attempt,
        "trips": [*record.trips, *(trip.record(outcome) for trip, outcome in decision.trips)],
        "rollbacks": list(record.rollbacks),
        "suspended": record.suspended,
    }
    updates = [condition(decision, spec.guardrails, record)]
    phase = status.get("phase") or "Running"
    if decision.act is Act.ROLLBACK and decision.rollback is not None:
        guardrails["rollbacks"].append(rollback_entry(decision.rollback, decision.change, at))
        updates.append(ConditionUpdate("Ready", "False", "GuardrailRollback",
                                       f"rolling back: attempt {decision.rollback.attempt} replaces RayJob "
                                       f"{plan.names.rayjob}"))
        phase = "Pending"
    elif decision.act is Act.SUSPEND:
        guardrails["suspended"] = True
        updates.append(ConditionUpdate("Ready", "False", "GuardrailSuspended", decision.why))
        phase = "Suspended"
    conditions = tuple(u for u in updates if u is not None)
    await write_status(namespace, name, status, status.get("observedGeneration"), phase, conditions,
                       {"guardrails": guardrails})
    for trip, outcome in decision.trips:
        metrics.GUARDRAIL_TRIPS.labels(detector=trip.detector, outcome=outcome.value).inc()
        events.post(job, type="Warning", reason="GuardrailTripped", message=trip.describe())
    if decision.act is Act.NONE:
        return
    tripped = conditions[0]
    events.post(job, type="Warning", reason=f"Guardrail{tripped.reason}", message=tripped.message)
    log.warning("%s/%s: %s", namespace, name, tripped.message)
    # Background propagation: the RayCluster and its pods go after the RayJob (kube.delete).
    await kube.delete("RayJob", namespace, plan.names.rayjob)
    if decision.act is Act.SUSPEND:
        await kube.patch_grpojob_spec(namespace, name, {"scheduling": {"suspend": True}})
    else:
        await start_pending_attempt(namespace, name)


async def start_pending_attempt(namespace: str, name: str) -> bool:
    """Create the RayJob of a decided rollback once the old one is gone. True when one was pending (created
    now, or still waiting for the old RayJob's deletion, which brings this back through its DELETED event)."""
    job = await kube.current_grpojob(namespace, name)
    if job is None:
        return False
    status = job.get("status") or {}
    record = Record.of(status)
    pending = record.pending
    if pending is None or record.suspended:
        return False
    parsed = _parsed(job)
    if parsed is None:
        return False
    spec, plan = parsed
    rollback = rollback_of(pending)
    existing = await kube.get("RayJob", namespace, plan.names.rayjob)
    if existing is not None and attempt_of(existing) != rollback.attempt:
        # The old attempt's: still being torn down, or never deleted (the operator stopped, or the delete failed,
        # right after the decision was written). Deleting it again is harmless; its DELETED event brings us back.
        await _delete_unless_going(existing)
        return True
    if existing is None:
        # the same placement as the first RayJob: an existing RWO checkpoint claim puts the head on the actor's node
        plan = await gate.with_existing_checkpoint_claim(namespace, spec, plan)
        body = with_rollback(render_rayjob(spec, plan), rollback)
        try:
            await create_children(job, [Child(body)])
        except kuberay.KubeRayUnsupported as exc:
            # A job from before spec.security existed is a token job now; on a KubeRay without authOptions its
            # new attempt cannot start. Said on the job; the caller's retry starts it once KubeRay is upgraded.
            COMPAT.unsupported(exc)
            events.warn(job, reason=UNSUPPORTED_KUBERAY,
                        message=f"attempt {rollback.attempt} cannot start: {exc.message}")
            raise
    # else: this attempt's RayJob exists already (created, then the status write below was lost): record it
    started = [*record.rollbacks[:-1], {**pending, "started": True}]
    where = f"checkpoint step {rollback.step}" if rollback.step else "the start"
    message = (f"attempt {rollback.attempt}: RayJob {plan.names.rayjob} created again, resuming from {where} "
               f"({pending.get('change', '')})")
    await write_status(
        namespace, name, status, status.get("observedGeneration"), "Pending",
        (ConditionUpdate("Ready", "False", "RayJobInitializing", message),),
        {"guardrails": {"attempt": rollback.attempt, "rollbacks": started}, "restarts": 0},
    )
    events.post(job, type="Normal", reason="GuardrailAttemptStarted", message=message)
    return True


async def _delete_unless_going(rayjob: dict) -> None:
    """Delete that very RayJob (its uid), unless its deletion has begun already."""
    meta = rayjob["metadata"]
    if not meta.get("deletionTimestamp"):
        await kube.delete("RayJob", meta["namespace"], meta["name"], uid=meta.get("uid"))


async def keep_suspended(job: dict) -> None:
    """A job the guardrails suspended: its RayJob deleted and its own suspend set, finished here when the operator
    stopped (or a request failed) between writing the decision and carrying it out. Both steps are idempotent."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    parsed = _parsed(job)
    if parsed is None:
        return
    rayjob = await kube.get("RayJob", namespace, parsed[1].names.rayjob)
    if rayjob is not None:
        await _delete_unless_going(rayjob)
    if not ((job.get("spec") or {}).get("scheduling") or {}).get("suspend"):
        await kube.patch_grpojob_spec(namespace, name, {"scheduling": {"suspend": True}})


async def resume_suspended(job: dict) -> bool:
    """The user set spec.scheduling.suspend=false on a job the guardrails suspended: a new attempt from the
    suspending trip's checkpoint, with the settings the rollbacks so far made. False when the guardrails did
    not suspend this job (the suspend is the user's own, forwarded as before)."""
    meta, status = job["metadata"], job.get("status") or {}
    record = Record.of(status)
    entry = resume_after_suspension(record, now())
    if entry is None:
        return False
    guardrails = {"suspended": False, "rollbacks": [*record.rollbacks, entry]}
    await kube.patch_grpojob_status(meta["namespace"], meta["name"], {"guardrails": guardrails})
    await start_pending_attempt(meta["namespace"], meta["name"])
    return True
