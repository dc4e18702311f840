"""Detectors that compare a metric with its own trailing median: kl_runaway and grad_spike.

A trailing reference, not the warm-up one: KL to the reference policy grows in every run that learns,
and the gradient norm drifts with response length and learning rate, so "far above where it was a few
steps ago" is the symptom, not "far above where it started".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpo_trainer.guardrails.latch import Latch
from grpo_trainer.guardrails.sample import DetectorState, StepSample, finite, no_learning_signal
from grpo_trainer.guardrails.stats import median, robust_sigma

# A robust sigma never below 5% of the median: a flat series (MAD 0) must not make noise look like a spike.
SIGMA_FLOOR = 0.05


@dataclass
class TrailingSpike:
    """Out of bounds when value > factor x trailing median, AND value - median > z x robust sigma (z=0:
    off), AND value > min_value (0: off). The trailing window holds the `window` steps before this one.
    A step `skip` gives a reason for is not evaluated: it neither enters the window nor counts towards the
    warm-up or k of m."""

    name: str
    metric: str
    warmup: int
    factor: float
    window: int
    k: int
    m: int
    z: float = 0.0
    min_value: float = 0.0
    skip: Callable[[StepSample], str | None] | None = None
    history: deque[float] = field(init=False)
    seen: int = 0
    restored: dict[str, float] | None = None

    def __post_init__(self) -> None:
        self.history = deque(maxlen=self.window)
        self.latch = Latch(self.name, self.k, self.m)

    def _reference(self) -> tuple[float, float] | None:
        """(median, robust sigma) of the trailing window; a restored one until the window is half full."""
        if self.restored is not None and len(self.history) < self.window // 2:
            return self.restored["median"], self.restored["sigma"]
        if not self.history:
            return None
        return median(self.history), robust_sigma(list(self.history), SIGMA_FLOOR)

    def observe(self, s: StepSample) -> DetectorState:
        value = getattr(s, self.metric)
        if not finite(value):  # absent, or non-finite (non_finite's business): not evaluated
            return self._idle(s.step, f"no finite {self.metric} at step {s.step}")
        if self.skip is not None and (why := self.skip(s)):
            return self._idle(s.step, why)
        ref = self._reference()
        self.history.append(value)
        self.seen += 1
        if ref is None or (self.restored is None and self.seen <= self.warmup):
            return self.latch.warming(s.step, f"warm-up: {self.seen} of {self.warmup} steps", value)
        med, sigma = ref
        out = value > self.factor * med and value - med > self.z * sigma and value > self.min_value
        why = f"{self.metric} {value:.4g} vs trailing median {med:.4g}"
        return self.latch.judge(s.step, out, why, value, med, {"sigma": sigma})

    def _idle(self, step: int, reason: str) -> DetectorState:
        return self.latch.idle(step, reason, warm=self.restored is not None or self.seen > self.warmup)

    def baselines(self) -> dict[str, float]:
        ref = self._reference()
        if ref is None or (self.restored is None and self.seen <= self.warmup):
            return {}
        return {"median": ref[0], "sigma": ref[1]}

    def restore(self, baselines: dict[str, Any]) -> None:
        med, sigma = baselines.get("median"), baselines.get("sigma")
        if finite(med) and finite(sigma) and med >= 0 and sigma >= 0:
            self.restored = {"median": float(med), "sigma": float(sigma)}


def kl_runaway(warmup: int, factor: float, min_kl: float, window: int, k: int, m: int) -> TrailingSpike:
    return TrailingSpike("kl_runaway", "kl_loss", warmup, factor, window, k, m, min_value=min_kl)


def grad_spike(warmup: int, factor: float, z: float, window: int, k: int, m: int) -> TrailingSpike:
    # Only steps with a learning signal are compared, with each other. A step whose advantages are all 0
    # has no policy-gradient term: its grad norm is the KL term's alone, a different quantity ~100x
    # smaller (H200 guard-temp run: 0.01 against 0.7). Mixed into one window, such steps drag the median
    # onto the small mode and every ordinary step looks like a 70x spike (a false trip at step 24 there).
    # Such a step cannot be an unstable policy update either, which is what this detector is for.
    return TrailingSpike("grad_spike", "grad_norm", warmup, factor, window, k, m, z=z, skip=no_learning_signal)
