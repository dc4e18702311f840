"""While a job is Pending, look at its claims: one that cannot bind becomes a ClaimsBound condition.

The operator watches no PVCs or Events (a cluster-wide watch of either costs more than these few
reads): a job that stays Pending gets a timer instead, every `storage_check_seconds`, until it leaves
Pending or every claim it mounts is bound. The jobs waiting in a namespace share one list of its claims and
one of their Events. A claim that a provisioner is still working on is given `claim_provisioning_grace_seconds`
before it is reported. What the claims and their Events mean is decided in `storage.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from grpo_operator.plan import PlanError
from grpo_operator.reconcile import storage
from grpo_operator.reconcile.common import SETTINGS, conditions_hold, parse
from grpo_operator.reconcile.retries import JOB_LOCKS, Retries
from grpo_operator.reconcile.status import merge_conditions
from grpo_operator.runtime import events, kube
from grpo_operator.runtime.lookups import SharedLookups, always
from grpo_operator.runtime.per_generation import PerGeneration

# A timer of their own, beside the creation retries (handlers.RETRIES): both may be pending for a job.
STORAGE_CHECKS = Retries()
# Phases in which a claim that cannot bind holds the job up: the preflight pod mounts the claims too, so
# an unbound claim leaves it Pending and the job in Preflight as surely as it leaves Ray pods Pending.
CLAIMS_CHECKED_IN = ("Preflight", "Pending")


# The jobs that wait in a namespace share one list of its claims and one of their Events, each read at most once per
# check period: per job, the check read each claim it mounts and the Events of each unbound one (most of a burst's
# requests per job, bench/operator/RESULTS.md). Remembered for a whole period, not 5 s: each job looks once a period
# anyway, and with 1000 jobs Pending the namespace's lists, parsed every 5 s, were a third of the operator's CPU
# (issue 34). A claim that binds is seen bound at most one period later; none is reported before its grace.
_SHARED_SECONDS = SETTINGS.storage_check_seconds
_CLAIMS: SharedLookups[dict[str, kube.ClaimFacts]] = SharedLookups(_SHARED_SECONDS)
_EVENTS: SharedLookups[dict[str, list[dict]]] = SharedLookups(_SHARED_SECONDS)


def _claims_mounted(job: dict) -> dict[str, str] | None:
    meta = job["metadata"]
    try:
        return storage.claims_of(*parse(meta["name"], meta["namespace"], job["spec"]))
    except (ValidationError, PlanError):
        return None


# The claims each job mounts, from its spec parsed once per generation (the check runs every few seconds).
_WATCHED = PerGeneration(_claims_mounted)


def seconds_since(timestamp: str, now: datetime) -> float:
    """Seconds from an RFC 3339 timestamp of the apiserver to `now`; infinite when there is none."""
    try:
        return (now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return float("inf")


def check_storage_later(namespace: str, name: str) -> None:
    STORAGE_CHECKS.schedule(
        (namespace, name), SETTINGS.storage_check_seconds, lambda: _check_storage_held(namespace, name)
    )


async def _check_storage_held(namespace: str, name: str) -> None:
    async with JOB_LOCKS.hold((namespace, name)), kube.call_site("storage-check"):
        await check_storage(namespace, name)


async def check_storage(namespace: str, name: str) -> None:
    """While the job waits (Preflight, Pending): say which of its claims cannot bind and why; look again later.
    The caller holds the job's lock (retries.JOB_LOCKS)."""
    job = await kube.current_grpojob(namespace, name)
    status = (job or {}).get("status") or {}
    if job is None or status.get("phase") not in CLAIMS_CHECKED_IN:
        return
    watched = _WATCHED.of(job)
    if watched is None:
        return
    claims = await _CLAIMS.lookup(namespace, lambda: kube.claims_in(namespace), keep=always)
    facts = [claims.get(c) for c in watched]
    problems = []
    now = datetime.now(UTC)
    for (claim, field), found in zip(watched.items(), facts, strict=True):
        if found is not None and found.phase != "Bound":
            claim_events = await _EVENTS.lookup(namespace, lambda: kube.claim_events_in(namespace), keep=always)
            problem = storage.unbound(claim, field, found, claim_events.get(claim, []),
                                      seconds_since(found.created, now), SETTINGS.claim_provisioning_grace_seconds)
            if problem is not None:
                problems.append(problem)
    update = storage.storage_condition(problems, storage.reported_unbound(status))
    if update is not None and not conditions_hold(status, (update,)):
        conditions = merge_conditions(status.get("conditions") or [], (update,), status.get("observedGeneration"))
        await kube.patch_grpojob_status(namespace, name, {"conditions": conditions})
        if update.status == "False":
            events.warn(job, reason="ClaimNotBound", message=update.message)
    if not storage.every_claim_bound(facts):
        check_storage_later(namespace, name)
