"""kopf's start-up, login and clean-up: the operator process's settings, client, metrics server and heap trim."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from grpo_operator import metrics
from grpo_operator.reconcile import mirror, runtimes
from grpo_operator.reconcile.binding import WAITING_CHECKS
from grpo_operator.reconcile.common import SETTINGS
from grpo_operator.reconcile.compat import COMPAT
from grpo_operator.reconcile.handlers import RETRIES
from grpo_operator.render.common import COMPONENT_LABEL, JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.runtime import diffbase, events, kube, memory

log = logging.getLogger("grpo_operator")

# Server-side label selectors of the child watches, the same filters the child handlers declare: kopf's watch of
# Jobs, and the operator's own watch of RayJobs (mirror.watch_rayjobs: KubeRay's status churn, without kopf).
RAYJOBS = ("ray.io", "rayjobs")
WATCH_SELECTORS: dict[tuple[str, str], str] = {
    RAYJOBS: f"{MANAGED_BY}={OPERATOR_NAME},{JOB_LABEL}",
    ("batch", "jobs"): f"{MANAGED_BY}={OPERATOR_NAME},{JOB_LABEL},{COMPONENT_LABEL} in (export,preflight)",
}


# Tasks the startup handler starts and the cleanup handler stops (the RayJob watches, the heap trim).
_background: list[asyncio.Task] = []
# The namespaces the operator serves (empty: the whole cluster), as kopf is told them (__main__).
_served: list[str] = []


def serve_namespaces(namespaces: list[str]) -> None:
    _served[:] = namespaces


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf would deep-copy every event's body twice for a diff nothing here reads (diffbase.py).
    diffbase.check_unused(kopf.get_default_registry())
    settings.persistence.diffbase_storage = diffbase.NoDiffBaseStorage()
    # kopf turns its own per-object log lines (and kopf.info) into Events at this level; at INFO that
    # is a "Handler 'reconcile' succeeded." Event per job beside our own Created Event (one request
    # more per job in a burst). Warnings and errors (a failing handler) still become Events, and
    # our own Events go through our client (runtime/events.py), not kopf's poster.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.error_backoffs = [1, 2, 5, 10, 20]
    # Watch only our children, filtered by the apiserver: KubeRay's submitter Jobs (one per RayJob),
    # other teams' RayJobs and every other Job in the cluster were parsed by kopf only to be dropped.
    for resource, selector in WATCH_SELECTORS.items():
        if resource != RAYJOBS:
            settings.watching.label_selectors[resource] = selector
    # kopf keeps a worker per object, holding its latest body, for this long after its last event;
    # at kopf's 5 s every object of a burst or a restart is held at once (bench/operator/RESULTS.md).
    settings.batching.idle_timeout = SETTINGS.worker_idle_seconds
    # The first listing in pages: a restart with thousands of jobs does not parse them all at once.
    settings.watching.chunk_size = 200

    async def login() -> kopf.ConnectionInfo | None:
        return kube.credentials(settings)

    kube.configure(kube.Client(login, max_connections=SETTINGS.max_connections))
    await _check_kuberay()
    _background.extend(mirror.watch_rayjobs(tuple(_served), WATCH_SELECTORS[RAYJOBS],
                                            int(settings.watching.server_timeout or 300)))
    _background.append(runtimes.watch_runtimes(int(settings.watching.server_timeout or 300)))
    metrics.serve(SETTINGS.metrics_host, SETTINGS.metrics_port)
    trimming = memory.start_trimming(SETTINGS.heap_trim_seconds)
    if trimming is not None:
        _background.append(trimming)
    memory.tune_gc(SETTINGS.gc_young_threshold)  # last: what start-up made is frozen with the imports


async def _check_kuberay() -> None:
    """Read the installed RayJob CRD now, so an unusable KubeRay is in the log before any job arrives."""
    try:
        problem = await COMPAT.problem()
    except Exception as exc:  # the apiserver not answering yet: each job's creation checks again
        log.warning("could not check the installed KubeRay at start-up: %s", exc)
        return
    if COMPAT.compatible:
        log.info("KubeRay's RayJob CRD has every field the operator renders")
    elif problem is None:
        log.info("KubeRay's RayJob schema is checked when each RayJob is created (the CRD is not read)")


@kopf.on.cleanup()
async def close_client(**_: Any) -> None:
    await events.flush()
    RETRIES.cancel_all()
    WAITING_CHECKS.cancel_all()
    for task in _background:
        task.cancel()
    _background.clear()
    await kube.api().close()


@kopf.on.login()
async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.AiohttpSession | None:
    """kopf's own credentials, in an HTTP session with a bounded connection pool.

    kopf's session allows unlimited connections: in a burst every object's worker opens its own
    TLS connection, each holding asyncio's TLS read buffer (at Python's own 256 KiB: 484 connections, 60 MB,
    for 300 jobs). Requests beyond the bound wait for a free connection instead.
    """
    info = kube.credentials(settings)
    if info is None:
        return None
    return kopf.AiohttpSession(
        aiohttp_session=kube.bounded_session(info, SETTINGS.max_connections),
        server=info.server,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
    )

