"""The operator process from start to exit: health endpoints and metrics on every replica, the start-up
checks, then kopf, at once or once this replica holds the lease (leader.py), until it stops or loses it.

Exit codes: 0 when stopped (SIGTERM: a rollout, a deleted pod), 1 when the lease was lost: kopf is stopped
first, and the pod restarts as a follower rather than reconcile beside a new leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import kopf

from grpo_operator import health as health_server
from grpo_operator import leader, metrics, startup_checks
from grpo_operator.runtime import kube
from grpo_operator.settings import OperatorSettings

log = logging.getLogger("grpo_operator")

# How long kopf may take to stop after the lease is lost, before the process exits anyway.
STOP_GRACE_SECONDS = 10.0

RunKopf = Callable[[asyncio.Event, asyncio.Event], Awaitable[None]]


@dataclass(frozen=True)
class RunPlan:
    identity: str
    lease: str | None  # None: no election, this process reconciles at once (one replica, local runs)
    lease_namespace: str
    health_url: str | None
    timing: leader.Timing
    # Whether the operator may read CRDs: the chart's single-namespace mode grants nothing cluster-wide.
    reads_crds: bool = True


def identity(env: Mapping[str, str]) -> str:
    """The pod's name (the chart's POD_ID) names the leader in the Lease; a process outside a pod gets its
    host's name and a random suffix, so two local copies never both believe they hold the lease."""
    return env.get("POD_ID") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _client(kopf_settings: kopf.OperatorSettings) -> kube.Client:
    async def login() -> kopf.ConnectionInfo | None:
        return (kopf.login_with_service_account(settings=kopf_settings)
                or kopf.login_with_kubeconfig(settings=kopf_settings))

    return kube.Client(login, max_connections=2)


async def _follow(elector: leader.LeaderElector) -> bool:
    """Wait for the lease; False if SIGTERM came first (a follower has nothing to hand over)."""
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(elector.acquire())
    loop.add_signal_handler(signal.SIGTERM, waiting.cancel)
    try:
        await waiting
        return True
    except asyncio.CancelledError:
        if waiting.cancelled():
            log.info("stopped while following %s", elector.state.holder or "nobody")
            return False
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _mark_running(ready_flag: asyncio.Event, state: health_server.Health) -> None:
    await ready_flag.wait()
    state.kopf_running = True


async def run(plan: RunPlan, run_kopf: RunKopf, kopf_settings: kopf.OperatorSettings,
              settings: OperatorSettings) -> int:
    state = health_server.Health(leader.Leadership(plan.identity, leading=plan.lease is None,
                                                   holder=plan.identity if plan.lease is None else ""))
    metrics.serve(settings.metrics_host, settings.metrics_port)
    server = await health_server.serve(state, plan.health_url) if plan.health_url else None
    client = _client(kopf_settings)
    try:
        state.problems.extend(await startup_checks.problems(client, readable=plan.reads_crds))
        for problem in state.problems:
            log.error("%s", problem)
        elector = None
        if plan.lease is not None:
            if not plan.lease_namespace:
                raise SystemExit("grpo-operator: --leader-elect needs POD_NAMESPACE (the chart sets it)")
            elector = leader.LeaderElector(client, plan.lease_namespace, plan.lease, plan.identity, plan.timing)
            state.leadership = elector.state
            if not await _follow(elector):
                return 0
        metrics.LEADING.set(1)
        return await _lead(run_kopf, elector, state)
    finally:
        metrics.LEADING.set(0)
        state.kopf_running = False
        if server is not None:
            await server.cleanup()
        await client.close()


async def _lead(run_kopf: RunKopf, elector: leader.LeaderElector | None, state: health_server.Health) -> int:
    stop_flag, ready_flag = asyncio.Event(), asyncio.Event()
    kopf_task = asyncio.ensure_future(run_kopf(stop_flag, ready_flag))
    running = asyncio.ensure_future(_mark_running(ready_flag, state))
    try:
        if elector is None:
            await kopf_task
            return 0
        keeping = asyncio.ensure_future(elector.keep())
        await asyncio.wait({kopf_task, keeping}, return_when=asyncio.FIRST_COMPLETED)
        if kopf_task.done():
            keeping.cancel()
            await elector.release()
            kopf_task.result()  # kopf's own failure, if it failed, is the process's
            return 0
        log.error("not the leader any more: stopping kopf, then exiting so the pod restarts as a follower")
        stop_flag.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(kopf_task, STOP_GRACE_SECONDS)
        return 1
    finally:
        running.cancel()
