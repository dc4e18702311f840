"""While a job waits (Preflight, Pending), look at what it waits for: claims that cannot bind become a ClaimsBound
condition, pods that cannot start (no node, an image that cannot be pulled, a crashing container) a PodsReady one.

The operator watches no PVCs, pods or Events (a cluster-wide watch of any of them costs more than these few
reads): a waiting job gets a timer instead, every `storage_check_seconds`, until it leaves Preflight and Pending.
The jobs waiting in a namespace share one list of its claims (read for a job until every claim it mounts was seen
bound, then not again until the job changes or one of its pods waits for a claim to bind), one of their Events (read
until every claim of the job is bound) and one of the names of its pods that have Warning Events; a job's own pods
are read only when one of them is among those (or a problem was reported and may be gone). A claim that a
provisioner is still working on is given `claim_provisioning_grace_seconds` before it is reported, counted from when
its provisioning was asked for or, while other claims of its StorageClass keep binding, from the last of those. What
the claims and their Events mean is decided in `storage.py`, what the pods' states mean in `pods.py`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grpo_operator.plan import PlanError
from grpo_operator.reconcile import pods, queueing, storage, waiting_lists
from grpo_operator.reconcile.autoscaling import NodePoolView, autoscalers_for
from grpo_operator.reconcile.common import SETTINGS, conditions_hold, parse
from grpo_operator.reconcile.retries import JOB_LOCKS, Retries
from grpo_operator.reconcile.status import ConditionUpdate, merge_conditions
from grpo_operator.runtime import events, kube
from grpo_operator.runtime.job_cache import revision_of
from grpo_operator.runtime.lookups import SharedLookups, always
from grpo_operator.runtime.per_generation import PerGeneration

# A timer of their own, beside the creation retries (handlers.RETRIES): both may be pending for a job.
WAITING_CHECKS = Retries()
# Phases in which a claim that cannot bind holds the job up: the preflight pod mounts the claims too, so
# an unbound claim leaves it Pending and the job in Preflight as surely as it leaves Ray pods Pending.
CLAIMS_CHECKED_IN = ("Preflight", "Pending")


@dataclass(frozen=True)
class _Warnings:
    """A namespace's pod Warnings, by every name a job's pods could have been named after (`pods.by_job_name`) ->
    the newest: the problems (`pods.newest_warnings`), and the scheduler's waits for claims to bind."""

    problems: dict[str, str]
    claim_waits: dict[str, str]


# The jobs that wait in a namespace share one look at its claims and one at their Events, each at most once per check
# period: per job, the check read each claim it mounts and the Events of each unbound one (most of a burst's requests
# per job, bench/operator/RESULTS.md). Remembered for a whole period, not 5 s: each job looks once a period anyway,
# and with 1000 jobs Pending the namespace's lists, parsed every 5 s, were a third of the operator's CPU (issue 34);
# a look asks only for what changed since the last (waiting_lists). A claim that binds is seen bound at most one
# period later; none is reported before its grace.
_SHARED_SECONDS = SETTINGS.storage_check_seconds
_CLAIMS: SharedLookups[dict[str, kube.ClaimFacts]] = SharedLookups(_SHARED_SECONDS)
_EVENTS: SharedLookups[dict[str, list[dict]]] = SharedLookups(_SHARED_SECONDS)
_WARNED_PODS: SharedLookups[_Warnings] = SharedLookups(_SHARED_SECONDS)
_NODEPOOLS: SharedLookups[list[NodePoolView]] = SharedLookups(_SHARED_SECONDS)
_WORKLOADS: SharedLookups[list[dict]] = SharedLookups(_SHARED_SECONDS)


async def nodepools() -> list[NodePoolView]:
    """Karpenter's NodePools (none without Karpenter), read at most once a check period for every job."""
    async def read() -> list[NodePoolView]:
        return [NodePoolView.of(p) for p in await kube.list_nodepools()]
    return await _NODEPOOLS.lookup("", read, keep=always)


@dataclass(frozen=True)
class _Watched:
    """What the check needs of a job's spec: the claims its pods mount (-> the spec field each comes from) and, when
    it is queued, its Kueue LocalQueue and the children Kueue admits."""

    claims: dict[str, str]
    queue: str | None
    queued_children: dict[tuple[str, str], str]


def _watched_of(job: dict) -> _Watched | None:
    try:
        spec, job_plan = parse(job)
    except (ValidationError, PlanError):
        return None
    queue = spec.scheduling.queue_name
    return _Watched(storage.claims_of(spec, job_plan), queue, queueing.owners_of(job_plan) if queue else {})


# From each job's spec parsed once per generation (the check runs every few seconds).
_WATCHED = PerGeneration(_watched_of)


# The Event each condition's False is announced with (the condition carries the reason of its own).
_EVENT_REASONS = {storage.CONDITION: "ClaimNotBound", queueing.CONDITION: "WaitingInQueue"}


def check_waiting_later(namespace: str, name: str) -> None:
    WAITING_CHECKS.schedule(
        (namespace, name), SETTINGS.storage_check_seconds, lambda: _check_waiting_held(namespace, name)
    )


async def _check_waiting_held(namespace: str, name: str) -> None:
    async with JOB_LOCKS.hold((namespace, name)), kube.call_site("storage-check"):
        await check_waiting(namespace, name)


async def check_waiting(namespace: str, name: str) -> None:
    """While the job waits (Preflight, Pending): say which of its claims cannot bind and which of its pods cannot
    start, and why; look again later. Once it runs, a problem said before is said to be over. The caller holds the
    job's lock (retries.JOB_LOCKS)."""
    seen = await _seen(namespace, name)
    if seen is None:
        return
    waiting = seen.waits
    if not waiting and not seen.said_false(pods.CONDITION) and not seen.said_false(queueing.CONDITION):
        forget(namespace, name)
        return
    # At once: a look at a namespace's list takes a second (waiting_lists), and the job's lock is held meanwhile.
    found = await asyncio.gather(_claims_update(namespace, name, seen) if waiting else _nothing(),
                                 _queue_update(namespace, seen, waiting), _pods_update(namespace, name, seen, waiting))
    updates = [u for u in found if u is not None and not seen.holds(u)]
    if updates:
        await _write(namespace, name, updates)
    if waiting:
        check_waiting_later(namespace, name)
    else:
        forget(namespace, name)


async def _nothing() -> None:
    return None


async def _write(namespace: str, name: str, updates: list[ConditionUpdate]) -> None:
    """The updates that do not hold on the job's newest version (a watch event may have come since it was seen),
    written, and each problem announced with an Event."""
    job = await kube.current_grpojob(namespace, name)
    if job is None:
        return
    status = job.get("status") or {}
    updates = [u for u in updates if not conditions_hold(status, (u,))]
    if not updates:
        return
    conditions = merge_conditions(status.get("conditions") or [], tuple(updates), status.get("observedGeneration"))
    await kube.patch_grpojob_status(namespace, name, {"conditions": conditions})
    for update in updates:
        if update.status == "False":
            events.warn(job, reason=_EVENT_REASONS.get(update.type, update.reason), message=update.message)


@dataclass(frozen=True)
class _Seen:
    """What the check reads of one version of a job: whether it waits, what it waits with, and its conditions as
    (type, status, reason, message). Kept per waiting job until the job changes (its resourceVersion): the check
    runs every period and a job changes a few times in its life, and parsing the job's kept JSON on every check was
    a tenth of the operator's CPU in a 1000-job burst (bench/operator/RESULTS.md, issue 34)."""

    revision: int | None
    waits: bool
    watched: _Watched | None
    conditions: tuple[tuple[Any, Any, Any, Any], ...]

    def said_false(self, kind: str) -> bool:
        """As status.said_false on the job's status."""
        return any(c[0] == kind and c[1] == "False" for c in self.conditions)

    def holds(self, update: ConditionUpdate) -> bool:
        """As common.conditions_hold on the job's status, for one update."""
        current = {c[0]: c[1:] for c in self.conditions}
        return current.get(update.type) == (update.status, update.reason, update.message)


def seen_of(job: dict) -> _Seen:
    status = job.get("status") or {}
    conditions = tuple((c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                       for c in status.get("conditions") or [])
    return _Seen(revision_of(job), waits(job), _WATCHED.of(job), conditions)


# (namespace, name) -> what the check saw of the job's newest version; only jobs that wait are kept.
_SEEN: dict[tuple[str, str], _Seen] = {}


async def _seen(namespace: str, name: str) -> _Seen | None:
    """The job's newest version as the check reads it; parsed again only when the job has changed."""
    key = (namespace, name)
    kept = _SEEN.get(key)
    if kept is not None and kept.revision is not None and kept.revision == kube.JOBS.revision(namespace, name):
        return kept
    job = await kube.current_grpojob(namespace, name)
    if job is None:
        _SEEN.pop(key, None)
        return None
    seen = seen_of(job)
    _SEEN[key] = seen
    return seen


def forget(namespace: str, name: str) -> None:
    """The job is gone, or waits no more: nothing of it is kept."""
    _SEEN.pop((namespace, name), None)
    _ALL_BOUND.pop((namespace, name), None)


# (namespace, name) -> the version of the job (its view) at which every claim it mounts was seen Bound. A bound claim
# stays bound, so the claims are not looked at again until the job changes: with 1000 jobs waiting for KubeRay long
# after their claims had bound, the namespace's claim list, read and decoded every period for them, was more than
# half of the waiting check's CPU (bench/operator/RESULTS.md, tenth round). A claim deleted and made again is seen
# through the scheduler: a pod of the job that waits for a claim to bind has its claims looked at again.
_ALL_BOUND: dict[tuple[str, str], _Seen] = {}


def waits(job: dict) -> bool:
    """Preflight or Pending; or Suspended by Kueue (the job is queued and its user did not suspend it): its RayJob
    waits for quota, which the QueueAdmitted condition says."""
    phase = (job.get("status") or {}).get("phase")
    if phase in CLAIMS_CHECKED_IN:
        return True
    user_suspended = bool(((job.get("spec") or {}).get("scheduling") or {}).get("suspend"))
    watched = _WATCHED.of(job)
    return phase == "Suspended" and not user_suspended and watched is not None and watched.queue is not None


async def _claims_update(namespace: str, name: str, seen: _Seen) -> ConditionUpdate | None:
    watched = seen.watched
    if watched is None:
        return None
    reported = seen.said_false(storage.CONDITION)
    if _ALL_BOUND.get((namespace, name)) is seen:
        if not pods.may_be_of(name, (await _warnings(namespace)).claim_waits):
            return storage.storage_condition([], reported)
        del _ALL_BOUND[(namespace, name)]  # a pod of the job waits for a claim to bind: one was made again
    claims = await _CLAIMS.lookup(namespace, lambda: _claims_in(namespace), keep=always)
    facts = [claims.get(c) for c in watched.claims]
    if all(f is not None and f.phase == "Bound" for f in facts):
        _ALL_BOUND[(namespace, name)] = seen
    problems = []
    now, grace = datetime.now(UTC), SETTINGS.claim_provisioning_grace_seconds
    for (claim, field), found in zip(watched.claims.items(), facts, strict=True):
        if found is not None and found.phase != "Bound":
            claim_events = await _EVENTS.lookup(namespace, lambda: waiting_lists.claim_events_in(namespace),
                                                keep=always)
            events_of = storage.events_of_claim(found, claim_events.get(claim, []))
            # Once reported, the wait is the ask's alone: a backlog seen later must not say it is over while the
            # claim is still Pending (and say it again when binds pause).
            progress = None if reported else _PROGRESS.get(namespace)
            waited = storage.provisioning_wait(found, events_of, progress, now, grace)
            problem = storage.unbound(claim, field, found, events_of, waited, grace)
            if problem is not None:
                problems.append(problem)
    return storage.storage_condition(problems, reported)


# namespace -> what its claim lists showed of the provisioners' progress (storage.binding_progress): a few numbers per
# StorageClass, kept from one list to the next.
_PROGRESS: dict[str, storage.BindingProgress] = {}


async def _claims_in(namespace: str) -> dict[str, kube.ClaimFacts]:
    claims = await waiting_lists.claims_in(namespace)
    _PROGRESS[namespace] = storage.binding_progress(_PROGRESS.get(namespace), claims, datetime.now(UTC))
    return claims


async def _queue_update(namespace: str, seen: _Seen, waiting: bool) -> ConditionUpdate | None:
    watched = seen.watched
    if watched is None or watched.queue is None:
        return None
    queue, owners = watched.queue, watched.queued_children
    reported = seen.said_false(queueing.CONDITION)
    if not waiting:
        return queueing.queue_condition([], queue, reported)
    workloads = await _WORKLOADS.lookup(namespace, lambda: kube.workloads_in(namespace), keep=always)
    return queueing.queue_condition(queueing.waiting_workloads(workloads, owners), queue, reported)


async def _pods_update(namespace: str, name: str, seen: _Seen, waiting: bool) -> ConditionUpdate | None:
    reported = seen.said_false(pods.CONDITION)
    if not waiting:
        return pods.pods_condition([], reported, [])  # it runs: what was said is over
    warned = (await _warnings(namespace)).problems
    if not reported and not pods.may_be_of(name, warned):
        return None
    found = [p for p in map(pods.pod_problem, await kube.job_pods(namespace, name)) if p is not None]
    if not found:
        # Said to be over once the job runs, not before: the Ray pods a WaitingForCapacity was said for at creation
        # may not exist yet, and a pod that stopped failing may not have started either.
        return None
    autoscalers: list[str] = []
    if any(p.reason == pods.UNSCHEDULABLE for p in found):
        job = await kube.current_grpojob(namespace, name)  # whole: the autoscalers are found from its plan
        autoscalers = await _autoscalers(job, found) if job is not None else []
    return pods.pods_condition(found, reported, autoscalers)


async def _warnings(namespace: str) -> _Warnings:
    async def read() -> _Warnings:
        found = await waiting_lists.pod_warnings_in(namespace)
        return _Warnings(pods.by_job_name(pods.newest_warnings(found)),
                         pods.by_job_name(pods.newest_claim_waits(found)))
    return await _WARNED_PODS.lookup(namespace, read, keep=always)


async def _autoscalers(job: dict, problems: list[pods.PodProblem]) -> list[str]:
    """Who may add nodes for the job's unschedulable GPU roles (its head and CPU pods have nodes, or none will)."""
    try:
        _, job_plan = parse(job)
    except (ValidationError, PlanError):
        return []
    pools = await nodepools() if SETTINGS.autoscaling == "auto" else []
    found: list[str] = []
    for group in job_plan.groups:
        if any(p.role == group.role for p in problems):
            found += [a for a in autoscalers_for(group, pools, SETTINGS.autoscaling) if a not in found]
    return found
