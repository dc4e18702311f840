"""Add `critic/score/std` to verl's step metrics: verl 0.9.1 reports score mean/min/max but no spread,
and a collapsing reward spread is the first sign GRPO has nothing left to learn from (all advantages 0).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

SCORE_STD_KEY = "critic/score/std"


def with_score_std(compute_data_metrics: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    if getattr(compute_data_metrics, "__grpo_wrapped__", False):
        return compute_data_metrics

    @functools.wraps(compute_data_metrics)
    def wrapped(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        metrics = compute_data_metrics(batch, *args, **kwargs)
        scores = batch.batch["token_level_scores"].sum(-1).float()
        metrics[SCORE_STD_KEY] = float(scores.std(unbiased=False).item()) if scores.numel() else float("nan")
        return metrics

    wrapped.__grpo_wrapped__ = True  # type: ignore[attr-defined]
    return wrapped


def install() -> None:
    """Both verl trainers import compute_data_metrics by name, so patch the names they call; only
    modules already loaded (the trainer that is running) are touched, nothing is imported."""
    import sys

    for module_name in ("verl.trainer.ppo.v1.trainer_base", "verl.trainer.ppo.ray_trainer"):
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, "compute_data_metrics"):
            module.compute_data_metrics = with_score_std(module.compute_data_metrics)
