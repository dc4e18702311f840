"""Per-step figures read from verl's console logger (`step:N - key:value - key:value ...`).

verl's LocalLogger prints one such line per step from the TaskRunner actor; Ray prefixes actor output
with `(TaskRunner pid=...)`, so a step line is searched for anywhere in a line.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

STEP_LINE = re.compile(r"step:(\d+) - (.*)$")
# pprint.pformat of a numpy scalar under numpy 2 reads `np.float64(1.5)`: the wrapper is optional
PAIR = re.compile(r"([^\s:][^:]*?):(?:np\.\w+\()?(-?(?:[0-9.]+(?:e[-+]?\d+)?|nan|inf))\)?(?: - |$)")

STEP_TIME = "timing_s/step"
THROUGHPUT = "perf/throughput"
REWARD = "critic/score/mean"
REWARD_EXTRAS = ("critic/score/std", "critic/score/min", "critic/score/max")
HEALTH = ("actor/entropy", "actor/kl_loss", "actor/pg_loss")
RESPONSE_LENGTH = "response_length/mean"
GEN_TIME = "timing_s/gen"
UPDATE_TIME = "timing_s/update_actor"
COLUMNS = (STEP_TIME, GEN_TIME, UPDATE_TIME, THROUGHPUT, REWARD, RESPONSE_LENGTH)
# verl's per-phase timers (timing_s/<phase>) compared between the runs
PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step")
PHASE_KEYS = tuple(f"timing_s/{p}" for p in PHASES)
SAVED = tuple(dict.fromkeys(COLUMNS + REWARD_EXTRAS + HEALTH + PHASE_KEYS))  # what a result JSON keeps of each step


@dataclass(frozen=True)
class Step:
    step: int
    metrics: dict[str, float]

    def get(self, key: str) -> float | None:
        return self.metrics.get(key)


def parse_step_line(line: str) -> Step | None:
    m = STEP_LINE.search(line.rstrip())
    if not m:
        return None
    metrics = {k.strip(): float(v) for k, v in PAIR.findall(m[2])}
    if not metrics:
        return None
    return Step(int(m[1]), metrics)


def parse_steps(lines: Iterable[str]) -> list[Step]:
    """One Step per step number (the last line wins), in step order."""
    steps: dict[int, Step] = {}
    for line in lines:
        step = parse_step_line(line)
        if step is not None:
            steps[step.step] = step
    return [steps[k] for k in sorted(steps)]


def values(steps: list[Step], key: str, skip_first: bool = True) -> list[float]:
    """The key's values over the steps, without step 1 (warm-up) unless asked."""
    return [v for s in steps if not (skip_first and s.step == 1) and (v := s.get(key)) is not None]


def median(steps: list[Step], key: str, skip_first: bool = True) -> float | None:
    vals = values(steps, key, skip_first)
    return statistics.median(vals) if vals else None


def mean(steps: list[Step], key: str, skip_first: bool = True) -> float | None:
    vals = values(steps, key, skip_first)
    return statistics.fmean(vals) if vals else None


def stderr(steps: list[Step], key: str, skip_first: bool = True) -> float | None:
    """Standard error of the mean of the key's values (steps taken as independent)."""
    vals = values(steps, key, skip_first)
    return statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) > 1 else None


def ratio(ours: float | None, stock: float | None) -> float | None:
    return ours / stock if ours is not None and stock else None


def ratio_of_means(ours: list[Step], stock: list[Step], key: str = STEP_TIME) -> tuple[float, float] | None:
    """ours' mean over stock's mean (step 1 left out) and its standard error (delta method). The error counts
    the step-to-step spread within the two runs only, not the run-to-run spread of the machine."""
    m_o, m_s, e_o, e_s = mean(ours, key), mean(stock, key), stderr(ours, key), stderr(stock, key)
    if m_o is None or not m_s or e_o is None or e_s is None:
        return None
    r = m_o / m_s
    return r, r * math.sqrt((e_o / m_o) ** 2 + (e_s / m_s) ** 2)


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def step_table(steps: list[Step]) -> str:
    """A markdown table: one row per step with the COLUMNS."""
    head = "| step | " + " | ".join(COLUMNS) + " |"
    rule = "|---:|" + "---:|" * len(COLUMNS)
    rows = [f"| {s.step} | " + " | ".join(fmt(s.get(c)) for c in COLUMNS) + " |" for s in steps]
    return "\n".join([head, rule, *rows])
