"""Robust statistics over a short step history: medians, MAD, a Theil-Sen slope, k-of-m persistence.

Pure functions and one tiny stateful window. Medians and MAD, not means and standard deviations,
because one wild step (the spike the detectors look for) must not move the reference it is compared with.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

# 1.4826 * MAD estimates the standard deviation of normal noise: thresholds read as "z robust sigmas".
MAD_TO_SIGMA = 1.4826


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median."""
    center = median(values)
    return median([abs(v - center) for v in values])


def robust_sigma(values: Sequence[float], rel_floor: float) -> float:
    """MAD-based sigma, never below rel_floor * |median|: a constant series (entropy of a frozen policy,
    a KL of exactly 0) has MAD 0, and dividing by ~0 would turn the next rounding error into a 'spike'."""
    return max(MAD_TO_SIGMA * mad(values), rel_floor * abs(median(values)))


def theil_sen_slope(values: Sequence[float]) -> float:
    """Median of the pairwise slopes of equally spaced points: one outlier step does not tilt it."""
    n = len(values)
    slopes = [(values[j] - values[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    return median(slopes) if slopes else 0.0


@dataclass
class Persistence:
    """k-of-m: the last m evaluated steps, whether each was out of bounds; `onset` is the first out-of-bounds
    step of the window once k of them were (the operator rolls back to a checkpoint before it)."""

    k: int
    m: int
    window: deque[tuple[int, bool]] = field(default_factory=deque)

    def push(self, step: int, out_of_bounds: bool) -> int | None:
        """Record a step; the onset step when k of the last m are out of bounds, else None."""
        self.window.append((step, out_of_bounds))
        while len(self.window) > self.m:
            self.window.popleft()
        out = [s for s, o in self.window if o]
        return out[0] if len(out) >= self.k else None

    def count(self) -> int:
        return sum(o for _, o in self.window)
