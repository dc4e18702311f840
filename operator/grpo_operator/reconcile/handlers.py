"""The GRPOJob handler: `lifecycle.next_action` decides from the object alone what each event needs.

Create the children once (after validating against cluster state), forward or report a spec edit, or
resync after a restart. No kopf create/update handlers: those keep two annotations and patch the job
twice per creation, one more event each for every watcher (bench/operator/RESULTS.md, third round).
Handlers are coroutines on kopf's event loop: they wait on the API server, not the CPU, so a burst of
jobs is hundreds of awaits in flight rather than a queue in front of a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import kopf
from pydantic import ValidationError

from grpo_operator import kuberay, metrics
from grpo_operator.api import GRPOJobSpec, SecuritySpec
from grpo_operator.node_rules import DRIVER_LABEL
from grpo_operator.plan import Plan, PlanError, parse_quantity, with_checkpoint_claim
from grpo_operator.reconcile import binding, gate, guardrail_actions, pods, runtimes
from grpo_operator.reconcile.autoscaling import autoscalers_for
from grpo_operator.reconcile.binding import WAITING_CHECKS, check_waiting_later
from grpo_operator.reconcile.capacity import (
    NodeView,
    capacity_shortfalls,
    gpu_memory_by_role,
    selector_string,
    unchecked_driver_pools,
)
from grpo_operator.reconcile.children import Child, missing_dependencies, override_volumes, training_children
from grpo_operator.reconcile.common import (
    SETTINGS,
    create_children,
    plan_of,
    refuse,
    validation_message,
    write_status,
)
from grpo_operator.reconcile.compat import COMPAT, UNSUPPORTED_KUBERAY
from grpo_operator.reconcile.guardrails import Record
from grpo_operator.reconcile.lifecycle import FORWARDED_FIELDS, Action, edited_fields, next_action, spec_digests
from grpo_operator.reconcile.mirror import sync_status
from grpo_operator.reconcile.preflight import disabled_condition
from grpo_operator.reconcile.preflight import outcome as preflight_outcome
from grpo_operator.reconcile.retries import JOB_LOCKS, Retries
from grpo_operator.reconcile.status import ConditionUpdate, observe_new_rayjob
from grpo_operator.render.common import COMPONENT_LABEL, JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.render.preflight_job import COMPONENT as PREFLIGHT_COMPONENT
from grpo_operator.render.preflight_job import rendered_digest
from grpo_operator.runtime import events, kube, priority
from grpo_operator.runtime.lookups import SharedLookups, always
from grpo_operator.runtimes import RUNTIME_STATUS, RuntimeProblem, recorded_monitoring

GROUP, VERSION, PLURAL = kube.GROUP, kube.VERSION, kube.PLURAL
log = logging.getLogger("grpo_operator")


@kopf.on.event(GROUP, VERSION, PLURAL)
async def grpojob_event(event: dict, body: kopf.Body, namespace: str, name: str, uid: str, **_: Any) -> None:
    """Every GRPOJob event: keep the metrics, then do what `lifecycle.next_action` says the object needs."""
    key = (namespace, name)
    if event.get("type") == "DELETED":
        kube.JOBS.forget(namespace, name)
        metrics.forget(namespace, name)
        RETRIES.cancel(key)
        WAITING_CHECKS.cancel(key)
        binding.forget(namespace, name)
        _SETTLED.discard(uid)
        return
    job = dict(body)
    kube.JOBS.remember(job)
    metrics.record_spec(namespace, name, job.get("spec") or {}, recorded_monitoring(job))
    if (job.get("status") or {}).get("phase"):
        metrics.record_phase(namespace, name, job["status"]["phase"])
    listing = event.get("type") is None
    action = next_action(job, listing=listing)
    if _created_already(job, action):
        return  # a body from before our own status write reached us: the children exist
    if action in _SLOTTED:
        WAITING.submit(key, listing)  # returns at once: kopf lets the body go, the job waits as its key
        return
    if action is not Action.NONE:
        async with JOB_LOCKS.hold(key):
            with kube.call_site(action.value):
                await ACTIONS[action](job)
    await _look_at_guardrails(job)


def _created_already(job: dict, action: Action) -> bool:
    """A phase-less version of a job whose children and first status this process wrote: not a new job."""
    return (action is Action.CREATE and job["metadata"].get("uid") in _SETTLED
            and not (job.get("status") or {}).get("phase"))


async def _look_at_guardrails(job: dict) -> None:
    if guardrail_actions.worth_a_look(job):
        await _act_on_guardrails(job["metadata"]["namespace"], job["metadata"]["name"])


async def _act_on_guardrails(namespace: str, name: str) -> None:
    async with JOB_LOCKS.hold((namespace, name)), kube.call_site("guardrails"):
        try:
            await guardrail_actions.act_on_guardrails(namespace, name)
        except Exception:
            # kopf drops a watch handler's exception; the trainer holds, so the next look acts.
            log.exception("acting on the guardrails of %s/%s failed; trying again", namespace, name)
            _retry_guardrails_later(namespace, name)


class _WaitingForSlots:
    """Jobs whose create or resync waits for one of the slots, each as its key and nothing more.

    Held by kopf's handler, each waiting job kept its event's body and kopf's per-event objects (a worker task,
    Body, Patch, loggers), ~50 KB a job: in a 1000-job burst with 64 slots that was the operator's memory peak
    (bench/operator/RESULTS.md). The handler returns instead, and once a slot is free the job's newest version
    (the process's JobCache: the event's, or a later one) decides again what it needs: a job edited while it
    waited is created as edited, one deleted meanwhile is not. A second event while a job waits adds nothing
    but whether it came from a (re)listing, which asks for a resync."""

    def __init__(self) -> None:
        self._listing: dict[tuple[str, str], bool] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task] = {}

    def submit(self, key: tuple[str, str], listing: bool) -> None:
        self._listing[key] = self._listing.get(key, False) or listing
        if key not in self._tasks:
            self._tasks[key] = asyncio.get_running_loop().create_task(self._act(key), name=f"slot for {key}")

    async def _act(self, key: tuple[str, str]) -> None:
        try:
            while key in self._listing:  # an event that came while the job acted: look again
                async with _held_slot(), JOB_LOCKS.hold(key):
                    job = kube.JOBS.get(*key)
                    listing = self._listing.pop(key)
                    if job is None:
                        continue  # deleted while it waited
                    action = next_action(job, listing=listing)
                    if _created_already(job, action):
                        continue  # this version is from before our status write
                    worth_a_look = guardrail_actions.worth_a_look(job)
                    if action is not Action.NONE:
                        with kube.call_site(action.value):
                            acting = ACTIONS[action](job)
                            del job  # held by the action as long as it needs it: create() lets go before its last wait
                            await acting
                if worth_a_look:
                    await _act_on_guardrails(*key)
        except Exception:
            # As kopf did with the handler's error: logged; create() and resync() schedule their own retries.
            log.exception("acting on %s/%s failed", *key)
            self._listing.pop(key, None)
        finally:
            del self._tasks[key]

    async def idle(self) -> None:
        """Until no job waits or acts (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)


WAITING = _WaitingForSlots()


@kopf.on.event("batch", "v1", "jobs", labels={MANAGED_BY: OPERATOR_NAME, JOB_LABEL: kopf.PRESENT,
                                               COMPONENT_LABEL: PREFLIGHT_COMPONENT})
async def preflight_job_event(event: dict, body: kopf.Body, namespace: str, labels: kopf.Labels,
                              **_: Any) -> None:
    """The preflight Job finished (or was deleted): its verdict into the status, the RayJob after a pass."""
    deleted = event.get("type") == "DELETED"
    preflight_job = None if deleted else dict(body)
    if preflight_job is not None and preflight_outcome(preflight_job, None).state == "running":
        return  # scheduled, started, ready: nothing to say until it ends (one GET per event saved)
    key = (namespace, labels[JOB_LABEL])
    async with JOB_LOCKS.hold(key), kube.call_site("preflight"):
        try:
            outcome = await gate.sync(*key, preflight_job=preflight_job,
                                      deleted_digest=rendered_digest(body) if deleted else None)
        except Exception:
            # kopf drops a watch handler's exception; the job is looked at again instead.
            log.exception("acting on the preflight of %s/%s failed; trying again", *key)
            _retry_later(*key, SETTINGS.error_retry_seconds)
            return
    if outcome is gate.Sync.RERUN:  # deleted by a user to check fixed files again (or lost): a new one
        await _retry(*key)


async def _retry(namespace: str, name: str) -> None:
    """A timer's attempt: on the job as it is now, whatever it still needs (creating, or its RayJob)."""
    # Read under the lock: a job read before waiting for it may have been edited and handled meanwhile.
    # The slot first, as for every create and resync: this acts only by creating or resyncing.
    async with _held_slot(), JOB_LOCKS.hold((namespace, name)), kube.call_site("retry"):
        job = await kube.get_grpojob(namespace, name)
        if job is None:
            return
        action = next_action(job, listing=True)
        if action in _SLOTTED:
            await ACTIONS[action](job)


def _retry_later(namespace: str, name: str, delay: float) -> None:
    RETRIES.schedule((namespace, name), delay, lambda: _retry(namespace, name))


def _retry_guardrails_later(namespace: str, name: str) -> None:
    async def again() -> None:
        async with JOB_LOCKS.hold((namespace, name)), kube.call_site("guardrails-retry"):
            await guardrail_actions.act_on_guardrails(namespace, name)
            await guardrail_actions.start_pending_attempt(namespace, name)

    RETRIES.schedule((namespace, name, "guardrails"), SETTINGS.error_retry_seconds, again)


async def create(job: dict) -> None:
    """Validate, check what the job needs exists, create the children once, write the first status.

    Refused input gets phase Invalid, a condition and an Event naming the field; a missing PVC or
    ConfigMap is looked for again every `dependency_retry_seconds`. The caller holds a slot and the lock.
    """
    namespace, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"].get("uid", "")
    subject = events.subject_of(job)
    RETRIES.cancel((namespace, name))
    started = time.monotonic()
    result = "error"
    created: list[tuple[str, str]] = []  # (kind, name) of each child this call created
    try:
        try:
            job, job_spec = await runtimes.take_runtime(job)  # its spec parsed and merged once
            job_plan = plan_of(job, job_spec)
        except RuntimeProblem as exc:
            result = "waiting"
            await refuse(job, exc.reason, exc.message, {RUNTIME_STATUS: None})  # it took none this time
            _retry_later(namespace, name, SETTINGS.dependency_retry_seconds)
            return
        except ValidationError as exc:
            result = "invalid"
            await refuse(job, "InvalidSpec", validation_message(exc))
            return
        except PlanError as exc:
            result = "invalid"
            await refuse(job, "InvalidSpec", str(exc))
            return

        # Ahead of every status write and of later jobs' requests: in a burst the RayJob of each job
        # comes as soon as the apiserver gets to it, not after the status traffic (priority.py).
        with priority.creating(started):
            unusable = await COMPAT.problem() or await COMPAT.job_problem(job_spec.security.ray_auth)
            nodes: list[NodeView] | None = None
            if unusable is not None:
                problems: list[tuple[str, str, str]] = [("", UNSUPPORTED_KUBERAY, unusable)]
            else:
                (problems, claims), nodes = await asyncio.gather(
                    _missing(namespace, job_spec, job_plan), _nodes(job, job_plan)
                )
            # Kueue admits by its own quotas; without it, a pool that can never hold a role is said now.
            waiting: tuple[ConditionUpdate, ...] = ()
            if nodes is not None and not job_spec.scheduling.queue_name:
                refused, waiting = await _capacity(job_plan, nodes)
                problems += refused
            if not problems:
                forbidden = await runtimes.pod_security_problem(namespace, job_spec, job_plan)
                if forbidden is not None:
                    problems.append(("pods", "PodSecurity", forbidden + runtimes.describe(job)))
            unchecked = unchecked_driver_pools(job_plan, nodes or []) if not problems else []
            if unchecked:
                events.warn(job, reason="DriverUnchecked", message=(
                    f"no {DRIVER_LABEL} label on GPU nodes the job may use ({', '.join(unchecked)}): whether their "
                    f"NVIDIA driver is {SETTINGS.driver_floor} or later, as the trainer image needs, is not known "
                    "before the GPUs are taken; install GPU Feature Discovery (the NVIDIA GPU operator does) to "
                    "have it checked"))
            if not problems:
                try:
                    job_plan = _with_existing_claims(job_spec, job_plan, claims)
                    if job_spec.preflight.enabled:
                        gpu_memory = gpu_memory_by_role(job_plan, nodes or [], _gpu_memory_override(job_spec))
                        created = _kinds_and_names(await gate.begin(job, job_spec, job_plan, gpu_memory, waiting))
                    else:
                        created = _kinds_and_names(await create_children(job, training_children(
                            job_spec, job_plan, SETTINGS.network_policy)))
                except PlanError as exc:
                    result = "invalid"
                    await refuse(job, "InvalidSpec", str(exc))
                    return
                except kuberay.KubeRayUnsupported as exc:
                    COMPAT.unsupported(exc)
                    problems = [("", UNSUPPORTED_KUBERAY, exc.message)]
        _release_slot()
        if problems:
            result = "waiting"
            await refuse(job, problems[0][1], "; ".join(p[2] for p in problems), runtimes.taken(job))
            _retry_later(namespace, name, SETTINGS.dependency_retry_seconds)
            return

        if created:  # one Event per job, not one per child: a burst of jobs is a burst of Events
            message = "created " + ", ".join(f"{kind} {child}" for kind, child in created) + runtimes.describe(job)
            events.post(job, type="Normal", reason="Created", message=message)
        preflight = job_spec.preflight.enabled
        if not preflight:
            first = _first_status(job, job_plan, waiting)
            # In a burst the status write waits behind every later job's creates (priority.py): what waits is this
            # small record, not the job's body, spec and plan (~60 KB a job, most of a 1000-job burst's peak RSS,
            # bench/operator/RESULTS.md, issue 34). The caller let go of the body already (_WaitingForSlots).
            del job, job_spec, job_plan
            await first.write()
        _SETTLED.add(uid)
        check_waiting_later(namespace, name)
        result = "success"
    except Exception as exc:
        # kopf logs and drops a watch handler's exception; the job is tried again instead.
        metrics.CHILD_CREATE_ERRORS.inc()
        log.exception(
            "creating the children of %s/%s failed; trying again in %.0fs",
            namespace,
            name,
            SETTINGS.error_retry_seconds,
        )
        events.warn(subject, reason="CreateFailed",
                    message=f"{exc}; trying again in {SETTINGS.error_retry_seconds:.0f}s")
        _retry_later(namespace, name, SETTINGS.error_retry_seconds)
        return
    finally:
        metrics.observe_reconcile(result, time.monotonic() - started)
    if preflight and not any(kind == "Job" for kind, _ in created):
        # The preflight Job of this spec was there already and may have its verdict (a restart, an edit
        # that changed nothing it checks). A Job created just now reports through its own events.
        if await gate.sync(namespace, name) is gate.Sync.RERUN:
            _retry_later(namespace, name, SETTINGS.error_retry_seconds)
    elif not any(kind == "RayJob" for kind, _ in created):
        # The RayJob was already there (a crash after creating it): it may have moved on meanwhile.
        # (A RayJob created just now has no status yet; its own events bring the status in.)
        await sync_status(namespace, name)


def _kinds_and_names(children: list[Child]) -> list[tuple[str, str]]:
    """What create() keeps of the children it created: their rendered bodies (a RayJob's tens of KB) would stay
    alive while it waits, without a slot, for its status write; in a 1000-job burst that wait is behind every
    other job's creation (priority.py), and peak RSS grew by 50 MiB."""
    return [(c.kind, c.name) for c in children]


Problems = list[tuple[str, str, str]]  # (field, reason, message) of what refuses a job


async def _capacity(job_plan: Plan, nodes: list[NodeView]) -> tuple[Problems, tuple[ConditionUpdate, ...]]:
    """The roles no node fits now: refused, unless an autoscaler may add nodes for them (reconcile/autoscaling.py);
    those are created, so that their pods ask for the nodes, with a PodsReady condition saying what they wait for."""
    shortfalls = capacity_shortfalls(job_plan, nodes)
    if not shortfalls:
        return [], ()
    pools = await binding.nodepools() if SETTINGS.autoscaling == "auto" else []
    refused: Problems = []
    waiting: list[str] = []
    for shortfall in shortfalls:
        group = job_plan.group(shortfall.role)  # type: ignore[arg-type]
        autoscalers = autoscalers_for(group, pools, SETTINGS.autoscaling) if group is not None else []
        if autoscalers:
            waiting.append(f"spec.{shortfall.field}: no node fits its pods now ({shortfall.reason}); "
                           f"{', '.join(autoscalers)} may add nodes for them, and the job's pods are created so "
                           "that it does")
        else:
            refused.append((shortfall.field, shortfall.reason, shortfall.message))
    if refused or not waiting:
        return refused, ()
    return [], (ConditionUpdate(pods.CONDITION, "False", pods.WAITING_FOR_CAPACITY, "; ".join(waiting)),)


@dataclass(frozen=True)
class _FirstStatus:
    """The first status write of a job created without the preflight: all it needs, none of the job's body."""

    namespace: str
    name: str
    current: dict[str, Any]
    generation: int | None
    phase: str
    conditions: tuple[ConditionUpdate, ...]
    fields: dict[str, Any]

    async def write(self) -> None:
        await write_status(self.namespace, self.name, self.current, self.generation, self.phase, self.conditions,
                           self.fields)


def _first_status(job: dict, plan: Plan, waiting: tuple[ConditionUpdate, ...] = ()) -> _FirstStatus:
    meta, status = job["metadata"], job.get("status") or {}
    # What status mirroring makes of a RayJob KubeRay has not touched yet, so the RayJob's first
    # events find nothing to change (rayjob_event skips a status-less RayJob).
    initial = observe_new_rayjob(plan.names.rayjob, plan.names.namespace, plan.exports, plan.rehearsal)
    fields = {
        **initial.fields,
        "configMapName": plan.names.configmap,
        "checkpointClaimName": plan.checkpoint_claim,
        "specDigests": spec_digests(job["spec"]),
        **runtimes.taken(job),
    }
    valid = ConditionUpdate("Valid", "True", "Accepted", "spec accepted; children created")
    return _FirstStatus(meta["namespace"], meta["name"], dict(status), meta.get("generation"), initial.phase,
                        (initial.ready, valid, disabled_condition(), *waiting), fields)


# Top-level spec fields the CRD gained, with a default, after jobs already existed: the apiserver fills the
# default into an older job, which is no edit of it (spec.security came with Ray token authentication).
DEFAULT_DIGESTS = spec_digests({"security": SecuritySpec().model_dump(by_alias=True)})


async def apply_edit(job: dict) -> None:
    """Forward a user's suspend/resume to the RayJob once; say so when an edit cannot reach the job.

    Children are rendered once, at creation. The CRD freezes most of the spec; what it leaves editable
    (image, env, verl overrides, ...) would otherwise change `metadata.generation` with no effect and
    no word to the user. suspend is forwarded once and never re-asserted: Kueue toggles it too.
    """
    meta, status, spec = job["metadata"], job.get("status") or {}, job.get("spec") or {}
    digests = spec_digests(spec)
    before = status.get("specDigests")
    edited = edited_fields(before, digests, DEFAULT_DIGESTS) if before is not None else []
    suspend = bool((spec.get("scheduling") or {}).get("suspend"))
    record = Record.of(status)
    if "spec.scheduling.suspend" in edited and record.suspended:
        # The guardrails suspended it (their own write of suspend lands here too): there is no RayJob to
        # forward to; un-suspending starts a new attempt.
        if not suspend:
            await guardrail_actions.resume_suspended(job)
    elif "spec.scheduling.suspend" in edited and record.pending is not None:
        # A rollback's (or a resume's) attempt is being started: its RayJob gets the spec's suspend when it is
        # created; the old one is going. Forwarding now would write a RayJob Kueue may hold.
        pass
    elif "spec.scheduling.suspend" in edited and status.get("rayJobName"):
        try:
            await kube.patch_rayjob_suspend(meta["namespace"], status["rayJobName"], suspend)
        except kube.ApiError as exc:
            if exc.status != 404:  # no RayJob (deleted meanwhile): nothing to forward to
                raise
    ignored = [f for f in edited if f not in FORWARDED_FIELDS]
    if ignored:
        events.warn(
            job,
            reason="SpecChangeNotApplied",
            message=f"{', '.join(ignored)} changed after the job started; the running job keeps the spec it was "
            "created with (delete and re-create the GRPOJob to apply the change)",
        )
    removed = {f: None for f in (before or {}) if f not in digests}  # a merge patch drops them
    applied = {"observedGeneration": meta.get("generation"), "specDigests": {**removed, **digests}}
    await kube.patch_grpojob_status(meta["namespace"], meta["name"], applied)


async def resync(job: dict) -> None:
    """Seen afresh (operator start, re-list): the children may have moved on while nobody watched.

    The caller holds a slot and the lock.
    """
    meta, status = job["metadata"], job.get("status") or {}
    if "specDigests" not in status:  # written by an operator before specDigests: record them now
        await kube.patch_grpojob_status(meta["namespace"], meta["name"], {"specDigests": spec_digests(job["spec"])})
    if status.get("phase") == "Pending" and not status.get("rayJobName"):
        # Its preflight passed, and the operator stopped before the RayJob existed.
        try:
            await gate.start_training(job)
        except Exception:
            log.exception("creating the RayJob of %s/%s failed; trying again", meta["namespace"], meta["name"])
            _retry_later(meta["namespace"], meta["name"], SETTINGS.error_retry_seconds)
            return
    await sync_status(meta["namespace"], meta["name"])
    if binding.waits(job):
        check_waiting_later(meta["namespace"], meta["name"])


# At most `max_jobs_in_flight` creates and resyncs at once: a burst of 1000 jobs otherwise rendered all 1000
# jobs' children at once to wait in the request queue, and the heap kept that high-water mark afterwards (the
# apiserver takes creates no faster either way); a restart lists every job at once.
_JOB_SLOTS = asyncio.Semaphore(SETTINGS.max_jobs_in_flight)
_SLOTTED = frozenset({Action.CREATE, Action.RESYNC})


_SLOT_RELEASE: ContextVar[Callable[[], None] | None] = ContextVar("grpo_slot_release", default=None)


@contextlib.asynccontextmanager
async def _held_slot() -> AsyncIterator[None]:
    """One of _JOB_SLOTS until the block ends, or until `_release_slot()` inside it gives it back earlier.

    Always taken before the job's lock and never while holding a lock: a job queued for a slot would otherwise hold
    its lock the whole wait, and its status mirroring and guardrail retries (a suspend) with it, behind up to every
    other job's create or resync."""
    slots = _JOB_SLOTS
    await slots.acquire()
    held = True

    def release() -> None:
        nonlocal held
        if held:
            held = False
            slots.release()

    token = _SLOT_RELEASE.set(release)
    try:
        yield
    finally:
        _SLOT_RELEASE.reset(token)
        release()


def _release_slot() -> None:
    """The children exist: what follows (the status write, the Event) holds the job's lock but no slot. Held to
    the end, a slot covered three round trips instead of two, and a 200-job burst's last RayJob waited for it
    (bench/operator/RESULTS.md: p99 5.5 s with 64 slots, 3.4 s with slots for every job)."""
    release = _SLOT_RELEASE.get()
    if release is not None:
        release()


ACTIONS = {Action.CREATE: create, Action.APPLY_EDIT: apply_edit, Action.RESYNC: resync}
RETRIES = Retries()
# uids whose children and first status this process wrote: a stale phase-less body is not a new job.
_SETTLED: set[str] = set()


async def _missing(
    namespace: str, spec: GRPOJobSpec, job_plan: Plan
) -> tuple[list[tuple[str, str, str]], dict[str, kube.ClaimFacts]]:
    """(what is missing, the claims found by name): one round trip for every object the job names."""
    # Read the claims the job names, not list the namespace's: every job adds a checkpoint claim,
    # so listing costs O(jobs) per job and O(jobs^2) for a burst.
    # All reads at once: the job waits for one round trip, not one per claim; and jobs naming the
    # same claims at about the same time share the reads (lookups.py).
    named = sorted(_claims_named(spec))
    function = spec.reward.function
    cm = function.config_map_name if function is not None else None
    mounted = sorted({v.config_map.name for _, v in override_volumes(spec) if v.config_map is not None} - {cm})
    found, keys, mounted_keys = await asyncio.gather(
        asyncio.gather(*(_claim(namespace, c) for c in named)),
        _configmap_keys(namespace, cm, function.key) if function is not None and cm else _nothing(),
        asyncio.gather(*(_configmap_keys(namespace, name, "") for name in mounted)),
    )
    claims = {c: facts for c, facts in zip(named, found, strict=True) if facts is not None}
    configmaps: dict[str, set[str] | None] = {cm: keys} if cm else {}
    configmaps.update(zip(mounted, mounted_keys, strict=True))
    return missing_dependencies(spec, job_plan, set(claims), configmaps), claims


def _with_existing_claims(spec: GRPOJobSpec, job_plan: Plan, claims: dict[str, kube.ClaimFacts]) -> Plan:
    """An existing checkpoint claim's access modes decide whether the head shares the actor's node."""
    existing = spec.checkpoints.volume.claim_name
    if existing is None:
        return job_plan
    return with_checkpoint_claim(job_plan, claims[existing].access_modes)


async def _claim(namespace: str, claim: str) -> kube.ClaimFacts | None:
    return await _CLAIMS.lookup(
        (namespace, claim), lambda: kube.claim_facts(namespace, claim), keep=lambda facts: facts is not None
    )


async def _configmap_keys(namespace: str, name: str, needed: str) -> set[str] | None:
    """The ConfigMap's keys (None: absent); `needed`: the key whose presence makes the answer worth keeping ("": any
    answer of an existing ConfigMap)."""
    return await _CONFIGMAP_KEYS.lookup(
        (namespace, name, needed), lambda: kube.configmap_keys(namespace, name),
        keep=lambda k: k is not None and (not needed or needed in k),
    )


# Found dependencies are remembered this long (lookups.py says why a deletion meanwhile is harmless).
DEPENDENCY_MEMORY_SECONDS = 5.0
_CLAIMS: SharedLookups[kube.ClaimFacts | None] = SharedLookups(DEPENDENCY_MEMORY_SECONDS)
_CONFIGMAP_KEYS: SharedLookups[set[str] | None] = SharedLookups(DEPENDENCY_MEMORY_SECONDS)


async def _nothing() -> None:
    return None


def _claims_named(spec: GRPOJobSpec) -> set[str]:
    named = {spec.model.claim_name, spec.data.claim_name, spec.checkpoints.volume.claim_name}
    if spec.reward.model is not None:
        named.add(spec.reward.model.claim_name)
    if spec.export.enabled and spec.export.target is not None:
        named.add(spec.export.target.claim_name)
    if spec.checkpoints.resume_from is not None:
        named.add(spec.checkpoints.resume_from.claim_name)
    named |= {v.persistent_volume_claim.claim_name for _, v in override_volumes(spec) if v.persistent_volume_claim}
    return {c for c in named if c}


def _gpu_memory_override(spec: GRPOJobSpec) -> int | None:
    value = spec.placement.gpu_memory
    return None if value is None else int(parse_quantity(value))


async def _nodes(job: dict, job_plan: Plan) -> list[NodeView] | None:
    """The nodes each role's nodeSelector matches (one shared read per selector); None when unreadable."""
    selectors = sorted({selector_string(g.pod.node_selector) for g in job_plan.groups})
    try:
        # keep=always: a burst of jobs reads each pool once; an empty pool is judged again on the retry
        reads = (_NODES.lookup(s, lambda s=s: _node_views(s), keep=always) for s in selectors)
        found = await asyncio.gather(*reads)
    except kube.ApiError as exc:
        if exc.status != 403:
            raise
        events.warn(job, reason="NodesUnreadable", message="the operator may not list nodes (chart value "
                    "rbac.nodes): pool capacity and GPU memory are not checked")
        return None
    return list({view.name: view for views in found for view in views}.values())


async def _node_views(selector: str) -> list[NodeView]:
    # Made once per read and shared by the jobs of a burst, not once per job.
    return [NodeView.of(n) for n in await kube.list_nodes(selector)]


_NODES: SharedLookups[list[NodeView]] = SharedLookups(DEPENDENCY_MEMORY_SECONDS)

