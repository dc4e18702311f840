"""`grpo_trainer_*` Prometheus metrics served from the TaskRunner (pinned to the head pod)."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from grpo_trainer.progress.step_metrics import StepMetrics

log = logging.getLogger(__name__)

_HELP: dict[str, str] = {
    "reward_mean": "Mean sequence reward (score) of the last step.",
    "reward_std": "Standard deviation of the sequence reward of the last step.",
    "reward_min": "Smallest sequence reward of the last step.",
    "reward_max": "Largest sequence reward of the last step.",
    "kl_loss": "Actor KL loss against the reference policy, last step.",
    "pg_loss": "Actor policy-gradient loss, last step (alerting watches it oscillate).",
    "entropy": "Actor policy entropy, last step.",
    "response_length_mean": "Mean response length in tokens, last step.",
    "throughput": "Tokens per second per GPU, last step.",
    "step_time_seconds": "Wall time of the last step in seconds.",
}


class TrainerMetrics:
    """Gauges fed from StepMetrics; one registry per instance so tests do not share global state."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.step = Gauge("grpo_trainer_step", "Last completed training step.", registry=self.registry)
        self.total_steps = Gauge("grpo_trainer_total_steps", "Planned training steps.", registry=self.registry)
        self.steps = Counter("grpo_trainer_steps", "Training steps completed by this process.", registry=self.registry)
        self.gauges: dict[str, Gauge] = {
            name: Gauge(f"grpo_trainer_{name}", text, registry=self.registry) for name, text in _HELP.items()
        }
        self._server: Any = None

    def observe(self, m: StepMetrics, total_steps: int | None = None) -> None:
        self.step.set(m.step)
        self.steps.inc()
        if total_steps is not None:
            self.total_steps.set(total_steps)
        for f in fields(m):
            value = getattr(m, f.name)
            if f.name in self.gauges and value is not None:
                self.gauges[f.name].set(value)

    def serve(self, port: int, address: str) -> int:
        """Start the /metrics HTTP server; returns the bound port (useful with port 0)."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        self._server = server
        bound = int(server.server_address[1])
        log.info("grpo_trainer metrics on http://%s:%d/metrics", address, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
