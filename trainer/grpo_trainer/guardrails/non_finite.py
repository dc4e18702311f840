"""non_finite: a NaN or infinite loss, gradient norm, entropy or KL. Not statistical: it trips on the step."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from grpo_trainer.guardrails.latch import Latch
from grpo_trainer.guardrails.sample import DetectorState, StepSample


@dataclass
class NonFinite:
    """k = m = 1: one NaN step is enough, since the optimizer has already applied (or skipped) it and the
    weights it leaves cannot be trusted; no baseline, so no warm-up either."""

    name: str = "non_finite"

    def __post_init__(self) -> None:
        self.latch = Latch(self.name, k=1, m=1)

    def observe(self, s: StepSample) -> DetectorState:
        bad = s.non_finite
        why = f"non-finite {', '.join(bad)} at step {s.step}" if bad else ""
        state = self.latch.judge(s.step, bool(bad), why, value=float(len(bad)), baseline=None)
        return state if state.tripped else replace(state, reason="loss, grad norm, entropy and KL finite")

    def baselines(self) -> dict[str, float]:
        return {}

    def restore(self, baselines: dict[str, Any]) -> None:
        return
