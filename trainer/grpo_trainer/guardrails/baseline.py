"""The job's own reference: medians of the first `warmup` steps, fixed once complete (or restored)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo_trainer.guardrails.sample import finite
from grpo_trainer.guardrails.stats import median


@dataclass
class WarmupBaseline:
    """Median of each named value over the first `warmup` steps that reported all of them."""

    names: tuple[str, ...]
    warmup: int
    seen: list[dict[str, float]] = field(default_factory=list)
    value: dict[str, float] | None = None

    def observe(self, values: Mapping[str, float]) -> bool:
        """Feed one step; True while still warming up (this step included in the baseline)."""
        if self.value is not None:
            return False
        self.seen.append(dict(values))
        if len(self.seen) == self.warmup:
            self.value = {n: median([v[n] for v in self.seen]) for n in self.names}
        return True

    def restore(self, baselines: Mapping[str, Any]) -> None:
        got = {n: baselines.get(n) for n in self.names}
        if all(finite(v) and v >= 0 for v in got.values()):
            self.value = {n: float(v) for n, v in got.items()}  # type: ignore[arg-type]
