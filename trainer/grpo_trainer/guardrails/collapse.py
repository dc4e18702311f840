"""Detectors against the job's warm-up baseline: policy_collapse and degenerate_batch."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from grpo_trainer.guardrails.baseline import WarmupBaseline
from grpo_trainer.guardrails.config import collapse_reach
from grpo_trainer.guardrails.latch import Latch
from grpo_trainer.guardrails.sample import DetectorState, StepSample, finite, rounding_tolerance
from grpo_trainer.guardrails.stats import theil_sen_slope


@dataclass
class PolicyCollapse:
    """Out of bounds when entropy < entropy_ratio x its warm-up median AND reward std < spread_ratio x
    its warm-up median AND reward is not improving (Theil-Sen slope over slope_window steps, times the
    window, below spread_ratio x the baseline reward std). A saturated reward is no exemption: a policy
    that collapsed onto what a reward pays for (one token repeated) scores the reward's best with no
    spread, exactly like a solved task, and GRPO has nothing left to learn from either (H200 guard-collapse).

    The onset is where the entropy fell below its bound, when that was before the k-of-m window (at most
    slope_window steps before it): a reward creeping up to its ceiling holds the trip back for several steps
    after the collapse, and a rollback to a checkpoint inside them would restore a policy already collapsed
    (the H200 run: entropy under the bound from the first judged step, 21; the window's first step 33)."""

    warmup: int
    entropy_ratio: float
    spread_ratio: float
    slope_window: int
    k: int
    m: int
    name: str = "policy_collapse"
    rewards: deque[float] = field(init=False)
    entropy_low_since: int | None = None

    def __post_init__(self) -> None:
        self.baseline = WarmupBaseline(("entropy", "rewardStd"), self.warmup)
        self.rewards = deque(maxlen=self.slope_window)
        self.latch = Latch(self.name, self.k, self.m)

    def observe(self, s: StepSample) -> DetectorState:
        if not (finite(s.entropy) and finite(s.reward_std) and finite(s.reward_mean)):
            return self.latch.idle(s.step, "no entropy, reward mean or std", warm=self.baseline.value is not None)
        entropy, spread, reward = float(s.entropy), float(s.reward_std), float(s.reward_mean)  # type: ignore[arg-type]
        self.rewards.append(reward)
        if self.baseline.observe({"entropy": entropy, "rewardStd": spread}):
            return self.latch.warming(s.step, f"warm-up: {len(self.baseline.seen)} of {self.warmup} steps", entropy)
        base = self.baseline.value or {}
        rise = theil_sen_slope(list(self.rewards)) * self.slope_window
        margin = self.spread_ratio * base["rewardStd"]
        entropy_low = entropy < self.entropy_ratio * base["entropy"]
        if not entropy_low:
            self.entropy_low_since = None
        elif self.entropy_low_since is None:
            self.entropy_low_since = s.step
        out = entropy_low and spread < margin and rise <= margin
        why = (
            f"entropy {entropy:.4g} (baseline {base['entropy']:.4g}), reward std {spread:.4g} "
            f"(baseline {base['rewardStd']:.4g}), reward rise over {self.slope_window} steps {rise:.3g}"
        )
        extra = {"rewardStd": spread, "rewardStdBaseline": base["rewardStd"], "rewardRise": rise}
        earliest = None
        if self.entropy_low_since is not None:
            earliest = max(self.entropy_low_since, s.step - collapse_reach(self.m, self.slope_window) + 1)
            why += f"; entropy under its bound since step {self.entropy_low_since}"
        return self.latch.judge(s.step, out, why, entropy, base["entropy"], extra, earliest_onset=earliest)

    def baselines(self) -> dict[str, float]:
        return dict(self.baseline.value or {})

    def restore(self, baselines: dict[str, Any]) -> None:
        self.baseline.restore(baselines)


@dataclass
class DegenerateBatch:
    """Out of bounds when clip ratio >= clip_ratio AND reward std <= spread_ratio x its warm-up median (or
    is zero up to rounding): every response cut at max length and all scored alike, so GRPO's advantages
    are ~0 and the step teaches nothing."""

    warmup: int
    clip_ratio: float
    spread_ratio: float
    k: int
    m: int
    name: str = "degenerate_batch"

    def __post_init__(self) -> None:
        self.baseline = WarmupBaseline(("rewardStd",), self.warmup)
        self.latch = Latch(self.name, self.k, self.m)

    def observe(self, s: StepSample) -> DetectorState:
        if not (finite(s.clip_ratio) and finite(s.reward_std)):
            return self.latch.idle(s.step, "no clip ratio or reward std", warm=self.baseline.value is not None)
        clip, spread = float(s.clip_ratio), float(s.reward_std)  # type: ignore[arg-type]
        if self.baseline.observe({"rewardStd": spread}):
            return self.latch.warming(s.step, f"warm-up: {len(self.baseline.seen)} of {self.warmup} steps", spread)
        base = (self.baseline.value or {})["rewardStd"]
        no_spread = spread <= max(self.spread_ratio * base, rounding_tolerance(s))
        out = clip >= self.clip_ratio and no_spread
        why = f"clip ratio {clip:.3g}, reward std {spread:.4g} (baseline {base:.4g})"
        return self.latch.judge(s.step, out, why, spread, base, {"clipRatio": clip})

    def baselines(self) -> dict[str, float]:
        return dict(self.baseline.value or {})

    def restore(self, baselines: dict[str, Any]) -> None:
        self.baseline.restore(baselines)
