"""kopf handlers: thin. They parse, call the pure planners and renderers, and make idempotent calls.

All are coroutines on kopf's event loop: they wait on the API server, not the CPU, so a burst of
jobs is hundreds of awaits in flight rather than a queue in front of a thread pool.

- every GRPOJob event: `lifecycle.next_action` decides from the object alone: create the children
  once (after validating against cluster state), forward or report a spec edit, or resync after a
  restart. No kopf create/update handlers: those keep two annotations and patch the job twice per
  creation, one more event each for every watcher (bench/operator/RESULTS.md, third round).
- any change of a child RayJob or converter Job: recompute the GRPOJob's phase and conditions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import kopf
from pydantic import ValidationError

from grpo_operator import diffbase, kube, memory, metrics, priority
from grpo_operator.api import GRPOJobSpec
from grpo_operator.children import Child, missing_dependencies, training_children
from grpo_operator.lifecycle import FORWARDED_FIELDS, TERMINAL_PHASES, Action, edited_fields, next_action, spec_digests
from grpo_operator.lookups import SharedLookups
from grpo_operator.plan import Plan, PlanError, plan
from grpo_operator.render import render_export_job
from grpo_operator.render.common import COMPONENT_LABEL, JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.retries import KeyedLocks, Retries
from grpo_operator.settings import OperatorSettings
from grpo_operator.status import (
    ConditionUpdate,
    Observation,
    merge_conditions,
    observe_export,
    observe_rayjob,
    restart_condition,
)

GROUP, VERSION, PLURAL = kube.GROUP, kube.VERSION, kube.PLURAL
SETTINGS = OperatorSettings.from_env()
log = logging.getLogger("grpo_operator")


# Server-side label selectors of the child watches, the same filters the child handlers declare.
WATCH_SELECTORS: dict[tuple[str, str], str] = {
    ("ray.io", "rayjobs"): f"{MANAGED_BY}={OPERATOR_NAME},{JOB_LABEL}",
    ("batch", "jobs"): f"{MANAGED_BY}={OPERATOR_NAME},{JOB_LABEL},{COMPONENT_LABEL}=export",
}


# Tasks the startup handler starts and the cleanup handler stops (the heap trim).
_background: list[asyncio.Task] = []


def credentials(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
    """In a pod its service account, else the kubeconfig: kopf's own readers, no client library."""
    return kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf would deep-copy every event's body twice for a diff nothing here reads (diffbase.py).
    diffbase.check_unused(kopf.get_default_registry())
    settings.persistence.diffbase_storage = diffbase.NoDiffBaseStorage()
    # kopf turns its own per-object log lines (and kopf.info) into Events at this level; at INFO that
    # is a "Handler 'reconcile' succeeded." Event per job beside our own Created Event (one request
    # more per job in a burst). Warnings and errors (a failing handler) still become Events, and
    # kopf.event (our Normal Events) is posted at any level.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.error_backoffs = [1, 2, 5, 10, 20]
    # Watch only our children, filtered by the apiserver: KubeRay's submitter Jobs (one per RayJob),
    # other teams' RayJobs and every other Job in the cluster were parsed by kopf only to be dropped.
    for resource, selector in WATCH_SELECTORS.items():
        settings.watching.label_selectors[resource] = selector
    # kopf keeps a worker per object, holding its latest body, for this long after its last event;
    # at kopf's 5 s every object of a burst or a restart is held at once (bench/operator/RESULTS.md).
    settings.batching.idle_timeout = SETTINGS.worker_idle_seconds
    # The first listing in pages: a restart with thousands of jobs does not parse them all at once.
    settings.watching.chunk_size = 200

    async def login() -> kopf.ConnectionInfo | None:
        return credentials(settings)

    kube.configure(kube.Client(login, max_connections=SETTINGS.max_connections))
    metrics.serve(SETTINGS.metrics_host, SETTINGS.metrics_port)
    trimming = memory.start_trimming(SETTINGS.heap_trim_seconds)
    if trimming is not None:
        _background.append(trimming)


@kopf.on.cleanup()
async def close_client(**_: Any) -> None:
    RETRIES.cancel_all()
    for task in _background:
        task.cancel()
    await kube.api().close()


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.AiohttpSession | None:
    """kopf's own credentials, in an HTTP session with a bounded connection pool.

    kopf's session allows unlimited connections: in a burst every object's worker opens its own
    TLS connection, each holding asyncio's 256 KiB SSL buffer (484 connections, 60 MB, for 300
    jobs). Requests beyond the bound wait for a free connection instead.
    """
    info = credentials(settings)
    if info is None:
        return None
    return kopf.AiohttpSession(
        aiohttp_session=kube.bounded_session(info, SETTINGS.max_connections),
        server=info.server,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
    )


def _parse(name: str, namespace: str, spec: dict) -> tuple[GRPOJobSpec, Plan]:
    job_spec = GRPOJobSpec.model_validate(spec)
    return job_spec, plan(job_spec, name=name, namespace=namespace, default_image=SETTINGS.default_trainer_image)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"spec.{where}: {error['msg']}")
    return "; ".join(parts)


async def _write_status(
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


async def _refuse(job: dict, reason: str, message: str) -> None:
    """Phase Invalid with the reason; once: a job re-checked unchanged (a retry, a restart) is left as it is."""
    meta, status = job["metadata"], job.get("status") or {}
    updates = (ConditionUpdate("Ready", "False", reason, message), ConditionUpdate("Valid", "False", reason, message))
    if (
        status.get("phase") == "Invalid"
        and status.get("observedGeneration") == meta.get("generation")
        and _conditions_hold(status, updates)
    ):
        return
    await _write_status(meta["namespace"], meta["name"], status, meta.get("generation"), "Invalid", updates)
    kopf.warn(job, reason=reason, message=message)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def grpojob_event(event: dict, body: kopf.Body, namespace: str, name: str, uid: str, **_: Any) -> None:
    """Every GRPOJob event: keep the metrics, then do what `lifecycle.next_action` says the object needs."""
    key = (namespace, name)
    if event.get("type") == "DELETED":
        metrics.forget(namespace, name)
        RETRIES.cancel(key)
        _SETTLED.discard(uid)
        return
    job = dict(body)
    metrics.record_spec(namespace, name, job.get("spec") or {})
    if (job.get("status") or {}).get("phase"):
        metrics.record_phase(namespace, name, job["status"]["phase"])
    action = next_action(job, listing=event.get("type") is None)
    if action is Action.CREATE and uid in _SETTLED:
        return  # a body from before our own status write reached us: the children exist
    if action is not Action.NONE:
        async with LOCKS.hold(key):
            await ACTIONS[action](job)


async def _retry(namespace: str, name: str) -> None:
    """A timer's attempt: on the job as it is now, if it still wants creating."""
    job = await kube.get_grpojob(namespace, name)
    if job is not None and next_action(job, listing=True) is Action.CREATE:
        async with LOCKS.hold((namespace, name)):
            await create(job)


def _retry_later(namespace: str, name: str, delay: float) -> None:
    RETRIES.schedule((namespace, name), delay, lambda: _retry(namespace, name))


async def create(job: dict) -> None:
    """Validate, check what the job needs exists, create the children once, write the first status.

    Refused input gets phase Invalid, a condition and an Event naming the field; a missing PVC or
    ConfigMap is looked for again every `dependency_retry_seconds`.

    At most `max_jobs_in_flight` jobs at once: a burst of 1000 otherwise rendered all 1000 jobs' children
    at once to wait in the request queue, and the heap kept that high-water mark afterwards. The
    apiserver takes creates no faster either way.
    """
    async with _JOB_SLOTS:
        await _create(job)


async def _create(job: dict) -> None:
    meta = job["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
    status = job.get("status") or {}
    RETRIES.cancel((namespace, name))
    started = time.monotonic()
    result = "error"
    created: list[Child] = []
    try:
        try:
            job_spec, job_plan = _parse(name, namespace, job["spec"])
        except ValidationError as exc:
            result = "invalid"
            await _refuse(job, "InvalidSpec", _validation_message(exc))
            return
        except PlanError as exc:
            result = "invalid"
            await _refuse(job, "InvalidSpec", str(exc))
            return

        # Ahead of every status write and of later jobs' requests: in a burst the RayJob of each job
        # comes as soon as the apiserver gets to it, not after the status traffic (priority.py).
        with priority.creating(started):
            problems = await _missing(namespace, job_spec, job_plan)
            if not problems:
                created = await _create_children(job, training_children(job_spec, job_plan))
        if problems:
            result = "waiting"
            await _refuse(job, problems[0][1], "; ".join(p[2] for p in problems))
            _retry_later(namespace, name, SETTINGS.dependency_retry_seconds)
            return

        if created:  # one Event per job, not one per child: a burst of jobs is a burst of Events
            message = "created " + ", ".join(f"{c.kind} {c.name}" for c in created)
            kopf.event(job, type="Normal", reason="Created", message=message)
        # What status mirroring makes of a RayJob KubeRay has not touched yet, so the RayJob's first
        # events find nothing to change (rayjob_event skips a status-less RayJob).
        initial = observe_rayjob(job_plan.names.rayjob, {}, job_spec.export.enabled)
        fields = {
            **initial.fields,
            "configMapName": job_plan.names.configmap,
            "checkpointClaimName": job_plan.checkpoint_claim,
            "specDigests": spec_digests(job["spec"]),
        }
        valid = ConditionUpdate("Valid", "True", "Accepted", "spec accepted; children created")
        await _write_status(namespace, name, status, generation, initial.phase, (initial.ready, valid), fields)
        _SETTLED.add(meta.get("uid", ""))
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
        kopf.warn(job, reason="CreateFailed", message=f"{exc}; trying again in {SETTINGS.error_retry_seconds:.0f}s")
        _retry_later(namespace, name, SETTINGS.error_retry_seconds)
        return
    finally:
        metrics.observe_reconcile(result, time.monotonic() - started)
    if not any(c.kind == "RayJob" for c in created):
        # The RayJob was already there (a crash after creating it): it may have moved on meanwhile.
        # (A RayJob created just now has no status yet; its own events bring the status in.)
        await sync_status(namespace, name)


async def apply_edit(job: dict) -> None:
    """Forward a user's suspend/resume to the RayJob once; say so when an edit cannot reach the job.

    Children are rendered once, at creation. The CRD freezes most of the spec; what it leaves editable
    (image, env, verl overrides, ...) would otherwise change `metadata.generation` with no effect and
    no word to the user. suspend is forwarded once and never re-asserted: Kueue toggles it too.
    """
    meta, status, spec = job["metadata"], job.get("status") or {}, job.get("spec") or {}
    digests = spec_digests(spec)
    before = status.get("specDigests")
    edited = edited_fields(before, digests) if before is not None else []
    if "spec.scheduling.suspend" in edited and status.get("rayJobName"):
        suspend = bool((spec.get("scheduling") or {}).get("suspend"))
        await kube.patch_rayjob_suspend(meta["namespace"], status["rayJobName"], suspend)
    ignored = [f for f in edited if f not in FORWARDED_FIELDS]
    if ignored:
        kopf.warn(
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

    Within the same `max_jobs_in_flight` as creation: a restart lists every job at once.
    """
    async with _JOB_SLOTS:
        await _resync(job)


async def _resync(job: dict) -> None:
    meta, status = job["metadata"], job.get("status") or {}
    if "specDigests" not in status:  # written by an operator before specDigests: record them now
        await kube.patch_grpojob_status(meta["namespace"], meta["name"], {"specDigests": spec_digests(job["spec"])})
    await sync_status(meta["namespace"], meta["name"])


_JOB_SLOTS = asyncio.Semaphore(SETTINGS.max_jobs_in_flight)
ACTIONS = {Action.CREATE: create, Action.APPLY_EDIT: apply_edit, Action.RESYNC: resync}
RETRIES = Retries()
LOCKS = KeyedLocks()
# uids whose children and first status this process wrote: a stale phase-less body is not a new job.
_SETTLED: set[str] = set()


async def _missing(namespace: str, spec: GRPOJobSpec, job_plan: Plan) -> list[tuple[str, str, str]]:
    # Read the claims the job names, not list the namespace's: every job adds a checkpoint claim,
    # so listing costs O(jobs) per job and O(jobs^2) for a burst.
    # All reads at once: the job waits for one round trip, not one per claim; and jobs naming the
    # same claims at about the same time share the reads (lookups.py).
    named = sorted(_claims_named(spec))
    function = spec.reward.function
    cm = function.config_map_name if function is not None else None
    present, keys = await asyncio.gather(
        asyncio.gather(*(_claim_exists(namespace, c) for c in named)),
        _configmap_keys(namespace, cm, function.key) if function is not None and cm else _nothing(),
    )
    claims = {c for c, exists in zip(named, present, strict=True) if exists}
    configmaps: dict[str, set[str] | None] = {cm: keys} if cm else {}
    return missing_dependencies(spec, job_plan, claims, configmaps)


async def _claim_exists(namespace: str, claim: str) -> bool:
    return await _CLAIMS.lookup(
        (namespace, claim), lambda: kube.exists("PersistentVolumeClaim", namespace, claim), keep=bool
    )


async def _configmap_keys(namespace: str, name: str, needed: str) -> set[str] | None:
    return await _CONFIGMAP_KEYS.lookup(
        (namespace, name, needed), lambda: kube.configmap_keys(namespace, name), keep=lambda k: bool(k and needed in k)
    )


# Found dependencies are remembered this long (lookups.py says why a deletion meanwhile is harmless).
DEPENDENCY_MEMORY_SECONDS = 5.0
_CLAIMS: SharedLookups[bool] = SharedLookups(DEPENDENCY_MEMORY_SECONDS)
_CONFIGMAP_KEYS: SharedLookups[set[str] | None] = SharedLookups(DEPENDENCY_MEMORY_SECONDS)


async def _nothing() -> None:
    return None


def _claims_named(spec: GRPOJobSpec) -> set[str]:
    named = {spec.model.claim_name, spec.data.claim_name, spec.checkpoints.volume.claim_name}
    if spec.reward.model is not None:
        named.add(spec.reward.model.claim_name)
    if spec.export.enabled and spec.export.target is not None:
        named.add(spec.export.target.claim_name)
    return {c for c in named if c}


async def _create_children(owner: kopf.Body, children: list[Child]) -> list[Child]:
    """Create what is missing; the children the RayJob's pods use first, all at once, then the RayJob.

    Pods of a RayJob created earlier would be refused for a missing ServiceAccount (and KubeRay
    would retry them later); the others do not depend on each other, so one round trip creates them.
    """
    first = [c for c in children if c.kind != "RayJob"]
    last = [c for c in children if c.kind == "RayJob"]
    created: list[Child] = []
    for wave in (first, last):
        results = await asyncio.gather(*(_ensure(owner, c) for c in wave))
        created.extend(c for c, new in zip(wave, results, strict=True) if new)
    return created


async def _ensure(owner: kopf.Body, child: Child) -> bool:
    body = child.body
    if child.owned:
        kopf.adopt(body, owner=owner)
    else:
        body["metadata"].setdefault("namespace", owner["metadata"]["namespace"])
    return await kube.create_if_absent(body)


_CHILD_SELECTOR = {MANAGED_BY: OPERATOR_NAME, JOB_LABEL: kopf.PRESENT}


@kopf.on.event("ray.io", "v1", "rayjobs", labels=_CHILD_SELECTOR)
async def rayjob_event(event: dict, body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> None:
    # The event carries the RayJob: no need to read it again (one GET less per KubeRay update).
    rayjob = None if event.get("type") == "DELETED" else dict(body)
    if rayjob is not None and not rayjob.get("status"):
        return  # KubeRay has not started on it: reconcile wrote the status such a RayJob gives
    await sync_status(namespace, labels[JOB_LABEL], rayjob=rayjob)


@kopf.on.event("batch", "v1", "jobs", labels={**_CHILD_SELECTOR, COMPONENT_LABEL: "export"})
async def export_job_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
    await sync_status(namespace, labels[JOB_LABEL])


_UNREAD: Any = object()


async def sync_status(namespace: str, name: str, rayjob: dict | None = _UNREAD) -> None:
    """Mirror the children into the GRPOJob's status; start the converter when training completed.

    `rayjob`: the RayJob as a watch event delivered it (None: deleted); read from the API when not given.
    """
    job = await kube.get_grpojob(namespace, name)
    if job is None:
        return
    status = job.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES or status.get("phase") in (None, "Invalid"):
        return
    facts = _facts(job)
    if facts is None:
        return  # reconcile() reports these
    if rayjob is _UNREAD:
        rayjob = await kube.get("RayJob", namespace, facts.rayjob)
    observation = observe_rayjob(facts.rayjob, rayjob, facts.export_enabled)
    if observation.wants_export:
        job_spec, job_plan = _parse(name, namespace, job["spec"])
        observation = await _export(job, job_spec, job_plan)
    restarted = _restarted(status, observation, facts.retries)
    if restarted is not None:
        observation = replace(observation, extra_conditions=(*observation.extra_conditions, restarted))
    fields = dict(observation.fields)
    if (
        observation.phase == status.get("phase")
        and _conditions_hold(status, (observation.ready, *observation.extra_conditions))
        and all(status.get(k) == v for k, v in fields.items())
    ):
        return
    await _write_status(
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
        kopf.event(job, type="Warning", reason=restarted.reason, message=restarted.message)
    if observation.finished:
        metrics.observe_completion(job["metadata"].get("creationTimestamp"), observation.phase)
    if observation.phase != status.get("phase"):
        kopf.event(
            job,
            type="Warning" if observation.phase == "Failed" else "Normal",
            reason=observation.ready.reason,
            message=observation.ready.message,
        )


def _restarted(status: dict, observation: Observation, retries: int) -> ConditionUpdate | None:
    """A Restarted condition when KubeRay counted one more failed attempt than the status shows."""
    restarts = int(observation.fields.get("restarts") or 0)
    if restarts <= int(status.get("restarts") or 0):
        return None
    return restart_condition(restarts, retries, status.get("checkpoint"))


@dataclass(frozen=True)
class _Facts:
    """What status mirroring needs from a parsed spec, kept small so thousands fit in memory."""

    rayjob: str
    export_enabled: bool
    retries: int


_FACTS: dict[tuple[str, str, str, int], _Facts] = {}
_FACTS_MAX = 4096


def _facts(job: dict) -> _Facts | None:
    """Parse and plan a job once per generation, not on every RayJob event (6 ms each, 5+ per job)."""
    meta = job["metadata"]
    key = (meta["namespace"], meta["name"], meta.get("uid", ""), int(meta.get("generation") or 0))
    found = _FACTS.get(key)
    if found is None:
        try:
            job_spec, job_plan = _parse(meta["name"], meta["namespace"], job["spec"])
        except (ValidationError, PlanError):
            return None
        found = _Facts(job_plan.names.rayjob, job_spec.export.enabled, job_spec.scheduling.retries)
        if len(_FACTS) >= _FACTS_MAX:
            _FACTS.pop(next(iter(_FACTS)), None)  # oldest first: dicts keep insertion order
        _FACTS[key] = found
    return found


def _conditions_hold(status: dict, updates: tuple[ConditionUpdate, ...]) -> bool:
    current = {c["type"]: (c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []}
    return all(current.get(u.type) == (u.status, u.reason, u.message) for u in updates)


async def _export(job: dict, job_spec: GRPOJobSpec, job_plan: Plan) -> Observation:
    namespace = job["metadata"]["namespace"]
    export_name = job_plan.names.export_job
    step = ((job.get("status") or {}).get("checkpoint") or {}).get("step")
    existing = await kube.get("Job", namespace, export_name)
    if existing is None:
        body = render_export_job(job_spec, job_plan, step)
        kopf.adopt(body, owner=job)
        if await kube.create_if_absent(body):
            kopf.event(job, type="Normal", reason="Created", message=f"created converter Job {export_name}")
        existing = await kube.get("Job", namespace, export_name)
    finished = any(
        c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
        for c in ((existing or {}).get("status") or {}).get("conditions") or []
    )
    result = await kube.job_termination_message(namespace, export_name) if finished else None
    target = job_spec.export.target
    return observe_export(export_name, existing, result, target.path if target else None)
