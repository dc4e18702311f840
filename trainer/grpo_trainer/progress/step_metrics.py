"""Pick the numbers we publish out of one verl step's metrics dict (keys as verl 0.9.1 spells them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# our field -> verl 0.9.1 metric keys, first present wins
VERL_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("training/global_step",),
    "reward_mean": ("critic/score/mean", "critic/rewards/mean"),
    "reward_std": ("critic/score/std",),  # added by grpo_trainer.progress.score_std (verl has no std)
    "reward_min": ("critic/score/min", "critic/rewards/min"),
    "reward_max": ("critic/score/max", "critic/rewards/max"),
    "kl_loss": ("actor/kl_loss",),
    "pg_loss": ("actor/pg_loss",),
    "entropy": ("actor/entropy",),
    "response_length_mean": ("response_length/mean",),
    "throughput": ("perf/throughput",),
    "step_time_seconds": ("timing_s/step",),
}


@dataclass(frozen=True)
class StepMetrics:
    step: int
    reward_mean: float | None = None
    reward_std: float | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    kl_loss: float | None = None
    pg_loss: float | None = None
    entropy: float | None = None
    response_length_mean: float | None = None
    throughput: float | None = None
    step_time_seconds: float | None = None


def _number(value: Any) -> float | None:
    if hasattr(value, "item"):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def extract(data: Mapping[str, Any], step: int) -> StepMetrics:
    """Pure: verl's metrics dict for `step` -> the values we publish (absent keys stay None)."""
    values: dict[str, float | None] = {}
    for name, keys in VERL_KEYS.items():
        if name == "step":
            continue
        values[name] = next((v for k in keys if k in data and (v := _number(data[k])) is not None), None)
    return StepMetrics(step=int(step), **values)
