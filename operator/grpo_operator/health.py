"""The operator's own health endpoints, served on every replica whether it leads or not.

- ``/healthz`` (liveness): the process's event loop answers and, on the leader, kopf still runs. A follower
  is alive while it waits for the lease: restarting it would help nobody.
- ``/readyz`` (readiness): nothing found at start-up makes the operator unfit (a GRPOJob CRD of another
  version), and where this replica leads, kopf has started.

Both answer JSON saying who leads (``leader``) and whether this replica reconciles (``reconciling``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from grpo_operator.leader import Leadership


@dataclass
class Health:
    leadership: Leadership
    kopf_running: bool = False
    # Why this replica must not be trusted to reconcile, each one sentence naming the fix.
    problems: list[str] = field(default_factory=list)

    def ready(self) -> bool:
        """Fit to reconcile: no start-up problem, and kopf running where this replica leads. A follower is
        ready (to take over): a Deployment and a PodDisruptionBudget count Ready pods, and a follower that
        never were would stall every rolling update and node drain."""
        return not self.problems and (self.kopf_running or not self.leadership.leading)

    def alive(self) -> bool:
        # A leader whose kopf stopped is stuck: nothing reconciles until the pod restarts.
        return not self.leadership.leading or self.kopf_running

    def report(self) -> dict[str, Any]:
        return {
            "identity": self.leadership.identity,
            "leading": self.leadership.leading,
            "leader": self.leadership.holder or None,
            "reconciling": self.leadership.leading and self.kopf_running,
            "problems": list(self.problems),
        }


def _answer(ok: bool, health: Health) -> web.Response:
    return web.Response(status=200 if ok else 503, text=json.dumps(health.report()) + "\n",
                        content_type="application/json")


def application(health: Health) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return _answer(health.alive(), health)

    async def readyz(_: web.Request) -> web.Response:
        return _answer(health.ready(), health)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def host_and_port(url: str) -> tuple[str, int]:
    """``http://0.0.0.0:8081/healthz`` -> ("0.0.0.0", 8081): the chart passes kopf-style liveness URLs."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.port is None:
        raise ValueError(f"the health endpoint {url!r} names no port, e.g. http://0.0.0.0:8081")
    return parts.hostname or "0.0.0.0", parts.port


async def serve(health: Health, url: str) -> web.AppRunner:
    host, port = host_and_port(url)
    runner = web.AppRunner(application(health), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
