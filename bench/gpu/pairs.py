"""Step-time ratio ours/stock over several pairs of runs (issue 17: >= 2 pairs in ABBA order).

One pair is one draw of the machine's run-to-run spread (session a's two warm stock runs differed by
6 %), so the figure is the mean of the pairs' ratios, with the spread between pairs beside it. Run in
ABBA order (ours, stock, stock, ours, ...), a drift of the machine that is linear in time cancels in
that mean. Each pair's ratio is of mean step times over steps 2..N (step 1 is start-up).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import steplog

TARGET = 1.02


@dataclass(frozen=True)
class Pair:
    ours_mean: float
    stock_mean: float
    ours_median: float
    stock_median: float
    steps: tuple[int, int]  # timed steps of ours and stock

    @property
    def ratio_of_means(self) -> float:
        return self.ours_mean / self.stock_mean

    @property
    def ratio_of_medians(self) -> float:
        return self.ours_median / self.stock_median


@dataclass(frozen=True)
class PairsRatio:
    pairs: tuple[Pair, ...]
    mean: float  # mean over the pairs of their ratio of means
    stderr: float | None  # standard error of that mean from the spread between pairs (>= 2 pairs)
    target: float = TARGET

    @property
    def meets_target(self) -> bool:
        return self.mean <= self.target

    def describe(self) -> str:
        k = len(self.pairs)
        spread = (
            "(one pair: no spread between pairs)"
            if self.stderr is None
            else f"+- {self.stderr:.3f} (standard error over {k} pairs)"
        )
        ratios = ", ".join(f"{p.ratio_of_means:.3f}" for p in self.pairs)
        verdict = "met" if self.meets_target else "not met"
        return (
            f"ours/stock step time by the mean of {k} pairs: {self.mean:.3f} {spread}; pairs: {ratios}. "
            f"Target <= {self.target:g}: {verdict} by the mean of pairs"
        )


def pair_of(ours: Sequence[steplog.Step], stock: Sequence[steplog.Step]) -> Pair:
    """Pure: one pair's means and medians of timing_s/step over steps 2..N."""
    values = (steplog.values(list(ours), steplog.STEP_TIME), steplog.values(list(stock), steplog.STEP_TIME))
    if not values[0] or not values[1]:
        raise ValueError("each run of a pair needs timed steps after step 1")
    return Pair(
        ours_mean=statistics.fmean(values[0]),
        stock_mean=statistics.fmean(values[1]),
        ours_median=statistics.median(values[0]),
        stock_median=statistics.median(values[1]),
        steps=(len(values[0]), len(values[1])),
    )


def pairs_ratio(runs: Sequence[tuple[Sequence[steplog.Step], Sequence[steplog.Step]]]) -> PairsRatio:
    """Pure: the mean over pairs of ours/stock (ratio of mean step times) and its standard error."""
    if not runs:
        raise ValueError("no pairs")
    pairs = tuple(pair_of(o, s) for o, s in runs)
    ratios = [p.ratio_of_means for p in pairs]
    stderr = statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else None
    return PairsRatio(pairs, statistics.fmean(ratios), stderr)
