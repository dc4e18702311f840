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
    # GRPO's learning signal: all zero when no group had a reward spread (the guardrails skip such steps)
    "advantage_max": ("critic/advantages/max",),
    "advantage_min": ("critic/advantages/min",),
    "kl_loss": ("actor/kl_loss",),
    "pg_loss": ("actor/pg_loss",),
    "loss": ("actor/loss",),  # pg_loss plus the KL and entropy terms: what backward() saw
    "grad_norm": ("actor/grad_norm",),
    "clip_fraction": ("actor/pg_clipfrac",),
    "entropy": ("actor/entropy",),
    "response_length_mean": ("response_length/mean",),
    # share of responses cut at max_response_length (the degenerate-batch guardrail watches it)
    "response_clip_ratio": ("response_length/clip_ratio",),
    "lr": ("actor/lr",),
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
    advantage_max: float | None = None
    advantage_min: float | None = None
    kl_loss: float | None = None
    pg_loss: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    clip_fraction: float | None = None
    entropy: float | None = None
    response_length_mean: float | None = None
    response_clip_ratio: float | None = None
    lr: float | None = None
    throughput: float | None = None
    step_time_seconds: float | None = None
    # Fields whose verl value was NaN or infinite: left out of the values above (a status line cannot
    # carry them), but never silently: the metrics publish them as NaN and count the step.
    non_finite: tuple[str, ...] = ()


def _float(value: Any) -> float | None:
    """A number as a float (NaN and infinities included); None for what is not a number."""
    if hasattr(value, "item"):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def extract(data: Mapping[str, Any], step: int) -> StepMetrics:
    """Pure: verl's metrics dict for `step` -> the values we publish (absent keys stay None).

    A NaN or infinite value (a diverged loss, an exploded gradient) is named in `non_finite` instead.
    """
    values: dict[str, float | None] = {}
    non_finite: list[str] = []
    for name, keys in VERL_KEYS.items():
        if name == "step":
            continue
        found = next((v for k in keys if k in data and (v := _float(data[k])) is not None), None)
        if found is not None and not math.isfinite(found):
            non_finite.append(name)
            found = None
        values[name] = found
    return StepMetrics(step=int(step), non_finite=tuple(non_finite), **values)
