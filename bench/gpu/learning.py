"""Does GRPO learn? The reward's slope over steps, against a control run at learning rate 0.

Both runs see the same model, prompts, reward and sampling; only the learning rate differs. With
learning rate 0 the policy never changes, so the control's reward is a stationary series: its slope
is zero up to sampling noise, and its standard error measures that noise. The learning run passes when

- its slope is positive by more than Z standard errors of itself, and
- it exceeds the control's slope by more than Z standard errors of the difference
  (sqrt(se_learning^2 + se_control^2)).

Z = 3: a one-sided chance below 0.2 % that sampling noise alone produces such a slope. The standard
errors are ordinary least squares': they take the residuals around a straight line as independent. A
learning curve that bends leaves larger residuals around its line, which only widens its own error
(the test gets stricter, not looser).

This catches a sign error (negative slope), a broken advantage or a reward that never reaches the
update (learning slope within the control's noise).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import steplog

Z = 3.0


@dataclass(frozen=True)
class Slope:
    per_step: float  # least-squares slope of the metric over the step number
    stderr: float  # its standard error
    n: int  # steps used
    first_mean: float  # mean of the metric over the first quarter of the steps
    last_mean: float  # ... and over the last quarter

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        return self.per_step - z * self.stderr, self.per_step + z * self.stderr

    def describe(self) -> str:
        lo, hi = self.interval()
        return (
            f"slope {self.per_step:+.3g}/step +- {self.stderr:.2g} (95 % {lo:+.3g} to {hi:+.3g}), {self.n} steps, "
            f"first quarter {self.first_mean:.4g} -> last quarter {self.last_mean:.4g}"
        )


def fit_slope(points: Sequence[tuple[float, float]]) -> Slope:
    """Pure: least-squares slope of y over x and its standard error; needs at least 3 points."""
    n = len(points)
    if n < 3:
        raise ValueError(f"a slope with a standard error needs at least 3 steps, got {n}")
    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all points are at the same step")
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = y_mean - slope * x_mean
    residual_ss = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    stderr = math.sqrt(residual_ss / (n - 2) / sxx)
    quarter = max(1, n // 4)
    ordered = [y for _, y in sorted(zip(xs, ys, strict=True))]
    return Slope(slope, stderr, n, statistics.fmean(ordered[:quarter]), statistics.fmean(ordered[-quarter:]))


def reward_slope(steps: Sequence[steplog.Step], key: str = steplog.REWARD) -> Slope:
    """The slope of one run's per-step metric (every step, the first included: it is the starting policy)."""
    return fit_slope([(s.step, v) for s in steps if (v := s.get(key)) is not None])


@dataclass(frozen=True)
class Verdict:
    learning: Slope
    control: Slope
    z_learning: float  # learning slope / its standard error
    z_difference: float  # (learning - control) / standard error of the difference
    z_required: float
    passed: bool
    reasons: tuple[str, ...]

    def describe(self) -> str:
        head = "PASS" if self.passed else "FAIL"
        lines = [
            f"{head}: learning {self.learning.describe()}",
            f"      control  {self.control.describe()}",
            f"      learning slope = {self.z_learning:.1f} standard errors above 0; "
            f"{self.z_difference:.1f} standard errors above the control (required: {self.z_required:g})",
        ]
        return "\n".join(lines + [f"      {r}" for r in self.reasons])


def _z(value: float, stderr: float) -> float:
    if stderr > 0:
        return value / stderr
    return math.copysign(math.inf, value) if value else 0.0


def judge(learning: Slope, control: Slope, z: float = Z) -> Verdict:
    """Pure: does the learning run's slope clear 0 and the control's slope by z standard errors?"""
    z_learning = _z(learning.per_step, learning.stderr)
    z_difference = _z(learning.per_step - control.per_step, math.hypot(learning.stderr, control.stderr))
    reasons = []
    if not z_learning > z:
        reasons.append(f"the learning slope is not clearly positive ({z_learning:.1f} < {z:g} standard errors)")
    if not z_difference > z:
        reasons.append(
            f"the learning slope is not clearly above the control's ({z_difference:.1f} < {z:g} standard errors)"
        )
    return Verdict(learning, control, z_learning, z_difference, z, not reasons, tuple(reasons))


def judge_runs(learning: Sequence[steplog.Step], control: Sequence[steplog.Step], key: str = steplog.REWARD) -> Verdict:
    return judge(reward_slope(learning, key), reward_slope(control, key))
