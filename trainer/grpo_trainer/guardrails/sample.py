"""What the detectors see of one step, and the state each reports back."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from grpo_trainer.progress.step_metrics import StepMetrics

# The fields a NaN or infinity in which means the update itself is broken (not just a bad batch).
NON_FINITE_FIELDS = ("loss", "pg_loss", "grad_norm", "entropy", "kl_loss")
# A reward std (or advantage) this small relative to the reward itself is float rounding of identical
# scores, not spread.
ZERO_SPREAD_REL = 1e-6


@dataclass(frozen=True)
class StepSample:
    step: int
    loss: float | None = None
    pg_loss: float | None = None
    grad_norm: float | None = None
    entropy: float | None = None
    kl_loss: float | None = None
    reward_mean: float | None = None
    reward_std: float | None = None
    reward_max: float | None = None
    advantage_max: float | None = None
    advantage_min: float | None = None
    clip_ratio: float | None = None
    non_finite: tuple[str, ...] = ()

    @classmethod
    def of(cls, m: StepMetrics) -> StepSample:
        return cls(
            step=m.step,
            loss=m.loss,
            pg_loss=m.pg_loss,
            grad_norm=m.grad_norm,
            entropy=m.entropy,
            kl_loss=m.kl_loss,
            reward_mean=m.reward_mean,
            reward_std=m.reward_std,
            reward_max=m.reward_max,
            advantage_max=m.advantage_max,
            advantage_min=m.advantage_min,
            clip_ratio=m.response_clip_ratio,
            non_finite=tuple(name for name in m.non_finite if name in NON_FINITE_FIELDS),
        )


class Status(StrEnum):
    WARMING = "warming"
    OK = "ok"
    TRIPPED = "tripped"


@dataclass(frozen=True)
class DetectorState:
    """One detector after one step. `value`/`baseline` are its headline numbers (what the gauges show);
    `extra` holds the other numbers its rule used. A tripped state is latched: it keeps its onset and
    trip step for the rest of the attempt, while `step` and the values go on following the run."""

    name: str
    status: Status
    step: int
    reason: str
    value: float | None = None
    baseline: float | None = None
    onset_step: int | None = None
    tripped_step: int | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def tripped(self) -> bool:
        return self.status is Status.TRIPPED


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def rounding_tolerance(s: StepSample) -> float:
    """What counts as zero spread at this step: float rounding of the reward's magnitude (and never < 1e-6)."""
    scale = abs(s.reward_mean) if finite(s.reward_mean) else 0.0  # type: ignore[arg-type]
    return ZERO_SPREAD_REL * max(1.0, scale)


def no_learning_signal(s: StepSample) -> str | None:
    """Why this step carried no policy-gradient signal, or None when it did (or nothing says).

    GRPO's advantage is a response's reward minus its group's mean (over the group's std): when no group
    had a reward spread, every advantage is 0, the policy-gradient term vanishes, and what the optimizer saw
    is the KL (and entropy) term alone. The advantages say so directly; without them a batch reward std of
    0 implies it (no spread in the batch, none in any group)."""
    tol = rounding_tolerance(s)
    if finite(s.advantage_max) and finite(s.advantage_min):
        largest = max(abs(s.advantage_max), abs(s.advantage_min))  # type: ignore[arg-type]
        return f"every advantage 0 at step {s.step} (no group had a reward spread)" if largest <= tol else None
    if finite(s.reward_std) and s.reward_std <= tol:  # type: ignore[operator]
        return f"reward std 0 at step {s.step} (no learning signal)"
    return None
