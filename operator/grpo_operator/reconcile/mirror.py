"""Child events into the GRPOJob's status: the RayJob and the converter Job, mirrored; the converter started
when training completed. Mapping the children to a phase and conditions is pure (`status.py`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

import kopf
from pydantic import ValidationError

from grpo_operator import metrics
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, PlanError
from grpo_operator.reconcile.common import conditions_hold, parse, write_status
from grpo_operator.reconcile.guardrail_actions import keep_suspended, start_pending_attempt
from grpo_operator.reconcile.guardrails import Record
from grpo_operator.reconcile.lifecycle import TERMINAL_PHASES
from grpo_operator.reconcile.retries import JOB_LOCKS
from grpo_operator.reconcile.status import (
    ConditionUpdate,
    Observation,
    observe_export,
    observe_rayjob,
    rayjob_inputs,
    rehearsal_condition,
    restart_condition,
    slim_rayjob,
)
from grpo_operator.render import render_export_job
from grpo_operator.render.common import COMPONENT_LABEL, JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.runtime import events, kube
from grpo_operator.runtime.per_generation import PerGeneration
from grpo_operator.runtime.watch import ChildWatch

log = logging.getLogger("grpo_operator")
_CHILD_SELECTOR = {MANAGED_BY: OPERATOR_NAME, JOB_LABEL: kopf.PRESENT}


def rayjob_event(kind: str, rayjob: dict) -> None:
    """A RayJob watch event (runtime/watch.py: kopf is not involved, each event costs a decode and this).

    The event carries the RayJob: no need to read it again. What waits for the job's lock is its slim part,
    keyed by the job, so the body goes at once."""
    meta = rayjob.get("metadata") or {}
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    if not job:
        return  # the watch selects on the label; kept for a relabelled RayJob's stub
    if kind != "DELETED" and not rayjob.get("status"):
        return  # KubeRay has not started on it: reconcile wrote the status such a RayJob gives
    _PENDING.submit((meta.get("namespace", ""), job), None if kind == "DELETED" else slim_rayjob(rayjob))


def watch_rayjobs(namespaces: tuple[str, ...], selector: str, server_timeout: int) -> list[asyncio.Task]:
    """The RayJob watches (one per namespace served, or one of the whole cluster), feeding `rayjob_event`."""
    resource = kube.RESOURCES["RayJob"]

    async def run(watch: ChildWatch) -> None:
        with kube.call_site("rayjob-watch"):
            await watch.run_forever()

    loop = asyncio.get_running_loop()
    return [loop.create_task(run(ChildWatch(kube.api(), resource.collection(namespace), selector, rayjob_event,
                                            server_timeout=server_timeout)), name=f"RayJob watch {namespace or '*'}")
            for namespace in (namespaces or (None,))]


class _PendingMirrors:
    """Per job, the newest RayJob event not yet mirrored (its slim part) and the one task mirroring it.

    The handler returns at once, so the watch lets the event's body go instead of holding it while the job's
    lock is taken (in a burst, by the job's creation waiting for its first status write behind later jobs'
    creates: a thousand RayJob bodies waited there, the operator's peak memory). Events that arrive meanwhile
    replace the waiting one: what a GET would return after the wait is the newest, not each state between."""

    def __init__(self) -> None:
        self._newest: dict[tuple[str, str], dict | None] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task] = {}

    def submit(self, key: tuple[str, str], rayjob: dict | None) -> None:
        if key not in self._tasks and _MIRRORED.unchanged(key, rayjob_inputs(rayjob)):
            return  # nothing waits, and this changes nothing mirroring acted on: no task, no lock
        self._newest[key] = rayjob
        if key not in self._tasks:
            self._tasks[key] = asyncio.get_running_loop().create_task(self._mirror(key), name=f"mirror {key}")

    async def _mirror(self, key: tuple[str, str]) -> None:
        try:
            while key in self._newest:
                async with JOB_LOCKS.hold(key), kube.call_site("mirror-rayjob"):
                    rayjob = self._newest.pop(key)
                    inputs = rayjob_inputs(rayjob)
                    if _MIRRORED.unchanged(key, inputs):
                        continue
                    revision = kube.JOBS.revision(*key)  # the version sync_status reads: the lock keeps ours out
                    await sync_status(*key, rayjob=rayjob)
                    _MIRRORED.record(key, inputs, revision)
        except Exception:
            # As kopf does with an event handler's error: logged, and the next event of the RayJob tries again.
            log.exception("mirroring the RayJob of %s/%s failed", *key)
            self._newest.pop(key, None)
        finally:
            del self._tasks[key]


class _MirroredInputs:
    """What each job's last completed mirroring acted on: the RayJob's inputs and the GRPOJob's version.

    An event that changes neither (most of KubeRay's status rewrites while a cluster starts) would reach the
    same decision again; it is skipped before the lock and the job's read. A later version of the GRPOJob (our
    own write too) makes the next event mirror in full once."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._seen: dict[tuple[str, str], tuple[tuple, int]] = {}

    def unchanged(self, key: tuple[str, str], inputs: tuple) -> bool:
        seen = self._seen.get(key)
        return seen is not None and seen == (inputs, kube.JOBS.revision(*key))

    def record(self, key: tuple[str, str], inputs: tuple, revision: int | None) -> None:
        if revision is None:
            return  # a version this process has not kept: nothing to compare the next event with
        if len(self._seen) >= self._limit and key not in self._seen:
            self._seen.pop(next(iter(self._seen)))  # oldest first
        self._seen[key] = (inputs, revision)


_MIRRORED = _MirroredInputs()
_PENDING = _PendingMirrors()


@kopf.on.event("batch", "v1", "jobs", labels={**_CHILD_SELECTOR, COMPONENT_LABEL: "export"})
async def export_job_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
    async with JOB_LOCKS.hold((namespace, labels[JOB_LABEL])), kube.call_site("mirror-export"):
        await sync_status(namespace, labels[JOB_LABEL])


_UNREAD: Any = object()


async def sync_status(namespace: str, name: str, rayjob: dict | None = _UNREAD) -> None:
    """Mirror the children into the GRPOJob's status; start the converter when training completed.

    `rayjob`: the RayJob as a watch event delivered it (None: deleted); read from the API when not given.
    The caller holds the job's lock (retries.JOB_LOCKS): this reads the status and writes it back.
    """
    job = await kube.current_grpojob(namespace, name)
    if job is None:
        return
    status = job.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES or status.get("phase") in (None, "Invalid", "Preflight"):
        return  # no RayJob yet (the preflight gate's business), or nothing left to follow
    record = Record.of(status)
    if record.suspended:
        # the guardrails deleted the RayJob on purpose: the job stays Suspended until resumed (and what the
        # suspension still lacks is done, after an operator restart too)
        await keep_suspended(job)
        return
    if record.pending is not None:
        await start_pending_attempt(namespace, name)  # a rollback waits for the old RayJob to be gone
        return
    facts = _FACTS.of(job)
    if facts is None:
        return  # reconcile() reports these
    if rayjob is _UNREAD:
        rayjob = await kube.get("RayJob", namespace, facts.rayjob)
    observation = observe_rayjob(facts.rayjob, rayjob, facts.exports, facts.rehearsal)
    if observation.release_cluster:
        # Training completed: the RayCluster is kept only after a failure (render/rayjob.py, TTL).
        await kube.patch_rayjob_ttl(namespace, facts.rayjob, 0)
    if observation.wants_export:
        job_spec, job_plan = parse(job)
        observation = await _export(job, job_spec, job_plan)
    restarted = _restarted(status, observation, facts)
    if restarted is not None:
        observation = replace(observation, extra_conditions=(*observation.extra_conditions, restarted))
    rehearsed = rehearsal_condition(status.get("rehearsal")) if facts.rehearsal else None
    if rehearsed is not None:
        observation = replace(observation, extra_conditions=(*observation.extra_conditions, rehearsed))
    fields = dict(observation.fields)
    if (
        observation.phase == status.get("phase")
        and conditions_hold(status, (observation.ready, *observation.extra_conditions))
        and all(status.get(k) == v for k, v in fields.items())
    ):
        return
    fields = {**observation.passive_fields, **fields}
    await write_status(
        namespace,
        name,
        status,
        # Mirroring acts on no spec: the generation stays the one creation or the last edit handled,
        # so an edit not yet handled still shows (lifecycle.next_action).
        status.get("observedGeneration"),
        observation.phase,
        (observation.ready, *observation.extra_conditions),
        fields,
    )
    if restarted is not None:
        events.post(job, type="Warning", reason=restarted.reason, message=restarted.message)
    if observation.finished:
        metrics.observe_completion(job["metadata"].get("creationTimestamp"), observation.phase)
    if observation.phase != status.get("phase") and observation.phase not in _PHASES_WITHOUT_AN_EVENT:
        events.post(
            job,
            type="Warning" if observation.phase == "Failed" else "Normal",
            reason=observation.ready.reason,
            message=observation.ready.message,
        )


# Events say what was decided and how a job ended. Reaching Pending or Running is in the phase (kubectl get -w)
# and in KubeRay's own Events on the RayJob; an Event of ours for it was one more request per job.
_PHASES_WITHOUT_AN_EVENT = frozenset({"Pending", "Running"})


def _restarted(status: dict, observation: Observation, facts: _Facts) -> ConditionUpdate | None:
    """A Restarted condition when KubeRay started one more retry than the status shows."""
    restarts = int(observation.fields.get("restarts") or 0)
    if restarts <= int(status.get("restarts") or 0):
        return None
    return restart_condition(restarts, facts.retries, status.get("checkpoint"), facts.resume)


@dataclass(frozen=True)
class _Facts:
    """What status mirroring needs from a parsed spec, kept small so thousands fit in memory."""

    rayjob: str
    exports: bool
    rehearsal: bool
    retries: int
    resume: str


def _derive_facts(job: dict) -> _Facts | None:
    try:
        job_spec, job_plan = parse(job)
    except (ValidationError, PlanError):
        return None
    return _Facts(job_plan.names.rayjob, job_plan.exports, job_plan.rehearsal, job_plan.retries,
                  job_spec.checkpoints.resume)


# Parsed and planned once per generation, not on every RayJob event (6 ms each, 5+ per job).
_FACTS = PerGeneration(_derive_facts)



async def _export(job: dict, job_spec: GRPOJobSpec, job_plan: Plan) -> Observation:
    namespace = job["metadata"]["namespace"]
    export_name = job_plan.names.export_job
    step = ((job.get("status") or {}).get("checkpoint") or {}).get("step")
    existing = await kube.get("Job", namespace, export_name)
    if existing is None:
        body = render_export_job(job_spec, job_plan, step)
        kopf.adopt(body, owner=job)
        if await kube.create_if_absent(body):
            events.post(job, type="Normal", reason="Created", message=f"created converter Job {export_name}")
        existing = await kube.get("Job", namespace, export_name)
    finished = any(
        c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
        for c in ((existing or {}).get("status") or {}).get("conditions") or []
    )
    result = await kube.job_termination_message(namespace, export_name) if finished else None
    target = job_spec.export.target
    return observe_export(export_name, existing, result, target.path if target else None)

