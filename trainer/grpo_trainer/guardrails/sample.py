"""What the detectors see of one step, and the state each reports back."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from grpo_trainer.progress.step_metrics import StepMetrics

# The fields a NaN or infinity in which means the update itself is broken (not just a bad batch).
NON_FINITE_FIELDS = ("loss", "pg_loss", "grad_norm", "entropy", "kl_loss")


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
