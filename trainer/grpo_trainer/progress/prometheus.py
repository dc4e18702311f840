"""`grpo_trainer_*` Prometheus metrics served from the TaskRunner (pinned to the head pod)."""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field, fields
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from grpo_trainer.guardrails.metrics import GuardrailGauges
from grpo_trainer.progress.step_metrics import StepMetrics

log = logging.getLogger(__name__)

_HELP: dict[str, str] = {
    "reward_mean": "Mean sequence reward (score) of the last step.",
    "reward_std": "Standard deviation of the sequence reward of the last step.",
    "reward_min": "Smallest sequence reward of the last step.",
    "reward_max": "Largest sequence reward of the last step.",
    "kl_loss": "Actor KL loss against the reference policy, last step.",
    "pg_loss": "Actor policy-gradient loss, last step (alerting watches it oscillate).",
    "grad_norm": "Actor gradient norm before clipping, last step (NaN when it was not finite).",
    "clip_fraction": "Fraction of tokens whose policy ratio was clipped (verl actor/pg_clipfrac), last step.",
    "entropy": "Actor policy entropy, last step.",
    "response_length_mean": "Mean response length in tokens, last step.",
    "throughput": "Tokens per second per GPU, last step.",
    "step_time_seconds": "Wall time of the last step in seconds.",
}


# The job's first steps: its own reference for "healthy" (the entropy-collapse and KL-growth alerts).
BASELINE_STEPS = 10


@dataclass
class EntropyBaseline:
    """The median entropy of global steps 1..BASELINE_STEPS, fixed once they are all seen.

    A job resumed past those steps never sees them again: its earlier attempt's value is restored from
    the GRPOJob's status instead (`restore`); without it there is no baseline and the alert stays quiet.
    """

    steps: int = BASELINE_STEPS
    seen: dict[int, float] = field(default_factory=dict)
    value: float | None = None

    def observe(self, step: int, entropy: float | None) -> float | None:
        """The baseline when this step completed it, else None."""
        if self.value is not None or entropy is None or not 1 <= step <= self.steps:
            return None
        self.seen[step] = entropy
        if len(self.seen) == self.steps:
            self.value = statistics.median(self.seen.values())
            return self.value
        return None

    def restore(self, value: float) -> None:
        self.value = value


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
        self.non_finite_steps = Counter(
            "grpo_trainer_nonfinite_steps",
            "Training steps with a NaN or infinite loss, gradient norm, entropy or reward.",
            registry=self.registry,
        )
        self.entropy_baseline = Gauge(
            "grpo_trainer_entropy_baseline",
            f"Median entropy of the job's first {BASELINE_STEPS} steps (NaN until then): the reference the "
            "entropy-collapse alert compares with.",
            registry=self.registry,
        )
        self.entropy_baseline.set(math.nan)  # a 0 would read as a measured baseline
        self.baseline = EntropyBaseline()
        self.guardrails = GuardrailGauges(self.registry)
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
        for name in m.non_finite:
            if name in self.gauges:
                self.gauges[name].set(math.nan)  # not the last finite value: that would look healthy
        if m.non_finite:
            self.non_finite_steps.inc()
        if self.baseline.observe(m.step, m.entropy) is not None:
            self.entropy_baseline.set(self.baseline.value)

    @property
    def non_finite_count(self) -> int:
        return int(self.non_finite_steps._value.get())

    def restore_baseline(self, value: float) -> None:
        """The baseline a previous attempt of the job computed (GRPOJob status.progress.entropyBaseline)."""
        self.baseline.restore(value)
        self.entropy_baseline.set(value)

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
