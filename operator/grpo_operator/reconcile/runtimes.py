"""GRPORuntimes as the operator knows them (one watch of the cluster's, no request per job), the runtime a job
takes at its creation, and the namespace's Pod Security level where a job's overrides need more than restricted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from grpo_operator.api import GRPORuntimeSpec
from grpo_operator.api.job import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.pod_security import asks, enforced_level, refusal_message, refused
from grpo_operator.runtime import kube
from grpo_operator.runtime.watch import ChildWatch
from grpo_operator.runtimes import (
    INVALID_RUNTIME_REASON,
    RUNTIME_STATUS,
    UNLISTED_RUNTIME_REASON,
    RuntimeProblem,
    apply_runtime,
    choose_runtime,
    pods_of,
    runtime_status,
)

log = logging.getLogger("grpo_operator.runtimes")
# How long a job waits for the first list of runtimes after the operator starts (the apiserver answering slowly);
# past it the job is judged on what is known, and one naming a runtime is looked at again later.
FIRST_LIST_SECONDS = 30.0


class RuntimeCache:
    """Every GRPORuntime by name, kept by a list-then-watch (runtime/watch.py)."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}
        self.listed = asyncio.Event()
        self.crd_missing = False

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            self.by_name.pop(name, None)
        else:
            self.by_name[name] = obj

    async def ready(self, timeout: float = FIRST_LIST_SECONDS) -> None:
        """Wait for the first list; a job judged without it could miss its default runtime for good."""
        try:
            await asyncio.wait_for(self.listed.wait(), timeout)
        except TimeoutError:
            raise RuntimeProblem(
                UNLISTED_RUNTIME_REASON,
                f"the operator has not listed the GRPORuntimes yet ({timeout:.0f} s after it started); the job is "
                "looked at again once it has (the operator's log says why the list fails)",
            ) from None


RUNTIMES = RuntimeCache()


class _RuntimeWatch(ChildWatch):
    """The watch of GRPORuntimes, saying when its first list is complete (or the CRD is not installed: an older
    chart; jobs then take no runtime, and one that names a runtime waits for it)."""

    cache: RuntimeCache | None = None

    async def relist(self) -> None:
        try:
            await super().relist()
        except kube.ApiError as exc:
            # Only a refusal that says there are none for us (no CRD, no right to list) counts as a list: after a
            # 5xx or 429 the jobs wait (RuntimesNotListed) rather than miss their default runtime for good.
            if exc.status in (403, 404) and self.cache is not None:
                if not self.cache.crd_missing:
                    log.warning("GRPORuntimes cannot be listed (%s: the CRD crds/grporuntime.yaml not installed, "
                                "or rbac.runtimes off): jobs take no runtime", exc.status)
                self.cache.crd_missing = True
                self.cache.by_name.clear()
                self.cache.listed.set()
            raise
        if self.cache is not None:
            self.cache.crd_missing = False
            self.cache.listed.set()


def watch_runtimes(server_timeout: int, cache: RuntimeCache = RUNTIMES) -> asyncio.Task:
    watch = _RuntimeWatch(kube.api(), kube.GRPORUNTIMES_PATH, "", cache.on_event, server_timeout=server_timeout)
    watch.cache = cache

    async def run() -> None:
        with kube.call_site("runtime-watch"):
            await watch.run_forever()

    return asyncio.get_running_loop().create_task(run(), name="GRPORuntime watch")


async def take_runtime(job: dict[str, Any], cache: RuntimeCache = RUNTIMES,
                       first_list_seconds: float = FIRST_LIST_SECONDS) -> tuple[dict[str, Any], GRPOJobSpec]:
    """The job with status.runtime set to the runtime it takes now (removed when it takes none), in memory: the
    first status write records it; and its effective spec under that runtime. Raises RuntimeProblem when the
    runtime cannot be chosen, pydantic's ValidationError when the job's spec does not parse.

    Called only while nothing has trained (creation, an edit before the RayJob, a retry of a waiting job): from
    then on the job keeps what it took."""
    await cache.ready(first_list_seconds)
    spec = job.get("spec") or {}
    runtime = choose_runtime(spec.get("runtime"), cache.by_name)
    status = dict(job.get("status") or {})
    job_spec = GRPOJobSpec.model_validate(spec)
    if runtime is None:
        status[RUNTIME_STATUS] = None
    else:
        name = (runtime.get("metadata") or {}).get("name", "")
        try:
            runtime_spec = GRPORuntimeSpec.model_validate(runtime.get("spec") or {})
        except ValidationError as exc:  # stored around the CRD's schema (an older CRD): the admin's to fix
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RuntimeProblem(INVALID_RUNTIME_REASON, f"GRPORuntime {name}: spec.{where}: {first['msg']}; the "
                                 "runtime must be corrected before jobs can take it") from exc
        job_spec, sources = apply_runtime(job_spec, runtime_spec)
        status[RUNTIME_STATUS] = runtime_status(runtime, sources)
    return {**job, "status": status}, job_spec


def taken(job: dict[str, Any]) -> dict[str, Any]:
    """status.runtime as a status write records it (None removes one recorded before)."""
    return {RUNTIME_STATUS: (job.get("status") or {}).get(RUNTIME_STATUS)}


def describe(job: dict[str, Any]) -> str:
    """The runtime part of the job's Created Event ("" without one)."""
    runtime = (job.get("status") or {}).get(RUNTIME_STATUS)
    if not runtime:
        return ""
    given = runtime.get("fromRuntime", []) + runtime.get("merged", [])
    fields = f": {', '.join(given)} from it" if given else ""
    return f"; GRPORuntime {runtime['name']} (generation {runtime.get('generation')}){fields}"


async def pod_security_problem(namespace: str, spec: GRPOJobSpec, plan: Plan) -> str | None:
    """Why the namespace's Pod Security level would refuse the job's pods, or None. Reads the namespace only when
    an override asks for more than restricted (most jobs never do)."""
    shapes = {"head": plan.head, **{g.role: g.pod for g in plan.groups}, "converter": plan.export_pod,
              "preflight": plan.preflight_pod or plan.head}
    created = pods_of(spec)  # a pod the job never creates (no export, no preflight) is nobody's business
    wanted = [ask for role, shape in shapes.items() if role in created for ask in asks(role, shape.override)]
    if not wanted:
        return None
    level = enforced_level(await kube.namespace_labels(namespace))
    refusals = refused(level, wanted)
    if not refusals:
        return None
    return refusal_message(namespace, level, refusals)
