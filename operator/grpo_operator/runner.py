"""The operator process from start to exit: health endpoints and metrics on every replica, the start-up
checks, then kopf, at once or once this replica holds the lease (leader.py), until it stops or loses it.

Exit codes: 0 when stopped (SIGTERM: a rollout, a deleted pod; a leader gives the lease up first), 1 when the
lease was lost (at once, without stopping kopf gracefully: another replica may lead already) or kopf failed; the
pod restarts as a follower either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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

# How often a failing start-up check is run again.
RECHECK_SECONDS = 30.0

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


def _login(kopf_settings: kopf.OperatorSettings) -> kube.Login:
    async def login() -> kopf.ConnectionInfo | None:
        return kube.credentials(kopf_settings)

    return login


def _on_sigterm(stopping: asyncio.Event) -> None:
    """Until kopf installs its own handler: SIGTERM asks for a clean stop (a follower that took the lease in the
    meantime gives it up) instead of killing the process with the lease held."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)


async def _follow(elector: leader.LeaderElector, stopping: asyncio.Event) -> float | None:
    """Wait for the lease; the start of the round that took it, or None if SIGTERM came first."""
    waiting = asyncio.ensure_future(elector.acquire())
    stopped = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not stopping.is_set():
        stopped.cancel()
        return waiting.result()
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await elector.release()  # in case the lease was taken just before the signal
    log.info("stopped while following %s", elector.state.holder or "nobody")
    return None


async def _mark_running(ready_flag: asyncio.Event, state: health_server.Health) -> None:
    await ready_flag.wait()
    state.kopf_running = True


async def run(plan: RunPlan, run_kopf: RunKopf, kopf_settings: kopf.OperatorSettings,
              settings: OperatorSettings) -> int:
    state = health_server.Health(leader.Leadership(plan.identity, leading=plan.lease is None,
                                                   holder=plan.identity if plan.lease is None else ""))
    metrics.serve(settings.metrics_host, settings.metrics_port)
    server = await health_server.serve(state, plan.health_url) if plan.health_url else None
    login = _login(kopf_settings)
    client = kube.Client(login, max_connections=2)
    stopping = asyncio.Event()
    _on_sigterm(stopping)
    # Before anything answers Ready; while a check fails it is run again in the background.
    await _check(client, state, plan.reads_crds)
    checks = asyncio.ensure_future(_check_while_unfit(client, state, plan.reads_crds))
    elector: leader.LeaderElector | None = None
    try:
        renewed = 0.0
        if plan.lease is not None:
            if not plan.lease_namespace:
                raise SystemExit("grpo-operator: --leader-elect needs POD_NAMESPACE (the chart sets it)")
            elector = leader.LeaderElector(leader.election_client(login, plan.timing),
                                           plan.lease_namespace, plan.lease, plan.identity, plan.timing)
            state.leadership = elector.state
            taken = await _follow(elector, stopping)
            if taken is None:
                return 0
            renewed = taken
        metrics.LEADING.set(1)
        return await _lead(run_kopf, elector, renewed, state, stopping)
    finally:
        checks.cancel()
        metrics.LEADING.set(0)
        state.kopf_running = False
        if server is not None:
            await server.cleanup()
        await client.close()
        if elector is not None:
            await elector.close()


async def _check(client: kube.Client, state: health_server.Health, reads_crds: bool) -> None:
    """The start-up checks; each new problem is one ERROR line."""
    found = await startup_checks.problems(client, readable=reads_crds)
    for problem in found:
        if problem not in state.problems:
            log.error("%s", problem)
    state.problems[:] = found


async def _check_while_unfit(client: kube.Client, state: health_server.Health, reads_crds: bool) -> None:
    """Again every RECHECK_SECONDS while a check fails: applying the right CRD after a `helm upgrade` makes the
    replica Ready without a restart."""
    while state.problems:
        await asyncio.sleep(RECHECK_SECONDS)
        await _check(client, state, reads_crds)


async def _lead(run_kopf: RunKopf, elector: leader.LeaderElector | None, renewed: float,
                state: health_server.Health, stopping: asyncio.Event) -> int:
    stop_flag, ready_flag = asyncio.Event(), asyncio.Event()
    kopf_task = asyncio.ensure_future(run_kopf(stop_flag, ready_flag))
    running = asyncio.ensure_future(_mark_running(ready_flag, state))
    # A SIGTERM before kopf installed its own handler lands on ours: pass it on.
    forward = asyncio.ensure_future(_forward(stopping, stop_flag))
    keeping = asyncio.ensure_future(elector.keep(renewed)) if elector is not None else None
    try:
        await asyncio.wait({kopf_task} | ({keeping} if keeping else set()), return_when=asyncio.FIRST_COMPLETED)
        if keeping is not None and keeping.done() and not kopf_task.done():
            # Lost: another replica may hold the lease from now on. Nothing of kopf's may run beside it, and a
            # graceful stop could take longer than the lease leaves: exit at once; the pod restarts as a follower,
            # and the new leader redoes whatever was in flight (every handler is idempotent).
            log.error("not the leader any more: exiting so the pod restarts as a follower")
            logging.shutdown()
            os._exit(1)
        if keeping is not None:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping
            await elector.release()  # type: ignore[union-attr]
        kopf_task.result()  # kopf's own failure, if it failed, is the process's
        return 0
    finally:
        running.cancel()
        forward.cancel()


async def _forward(stopping: asyncio.Event, stop_flag: asyncio.Event) -> None:
    await stopping.wait()
    stop_flag.set()
