"""Start-up breakdown of one training run, read from its timed log (`run_grpo.stream` writes it).

Every line of a run's log carries the seconds since the process started (`   12.345 | <line>`), so
one set of markers gives the same phases for grpo-train and for stock `python -m verl.trainer.main_ppo`:
both run verl 0.9.1's `run_ppo` and TaskRunner, which print the markers below. Lines printed by Ray
workers arrive through Ray's log monitor, a fraction of a second after they were written.

Phases (the issue's breakdown; each from one marker to the next, "-" where a marker is missing):

    driver imports, config, data  process start -> verl's "ray init kwargs" line
    ray start                     -> "Started a local Ray instance" / "Connected to Ray cluster"
    task runner up                -> first line of the TaskRunner actor
    task runner setup             -> "train and validate dataloader initialized" (TransferQueue, data)
    worker group                  -> "create worker group" (verl's WorkerDict actors spawned)
    model load                    -> "actor and ref model engine initialized" (FSDP actor and reference)
    reward                        -> "reward loop manager initialized" (reward workers; a reward model's servers)
    vllm engine                   -> "checkpoint engine manager initialized" (rollout servers up)
    ready to fit                  -> "all initialize finished, ready to fit"
    first step                    -> the `step:1` line (agent-loop workers start, first generation, update)

The first step's own generation time is verl's `timing_s/gen` of step 1. grpo-train also prints what
its own start-up parts took ("grpo-train: data prepared in 1.2 s ...", "grpo-train: task runner prepared:
imports 3.0 s, transfer queue 9.1 s"); `ours_parts` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import steplog

TIMED_LINE = re.compile(r"^\s*(\d+\.\d+) \| (.*)$")
OUR_PART = re.compile(r"grpo-train: (.+?) in (\d+(?:\.\d+)?) s")
OUR_PREPARED = re.compile(r"grpo-train: task runner prepared: (.*)$")
PART_SECONDS = re.compile(r"([a-z][a-z ]*?) (\d+(?:\.\d+)?) s")


def timed_line(elapsed_s: float, line: str) -> str:
    """The log form of one output line: seconds since the process started, then the line."""
    return f"{elapsed_s:9.3f} | {line}"


@dataclass(frozen=True)
class Marker:
    name: str
    pattern: re.Pattern[str]


MARKERS: tuple[Marker, ...] = (
    Marker("ray_init", re.compile(r"ray init kwargs:")),
    Marker("ray_up", re.compile(r"Started a local Ray instance|Connected to Ray cluster")),
    Marker("task_runner", re.compile(r"\(\w*TaskRunner\w* pid=\d+\)")),
    Marker("dataloader", re.compile(r"train and validate dataloader initialized")),
    Marker("worker_group", re.compile(r"create worker group")),
    Marker("model_loaded", re.compile(r"actor and ref model engine initialized")),
    Marker("reward_ready", re.compile(r"reward loop manager initialized")),
    Marker("rollout_ready", re.compile(r"checkpoint engine manager initialized")),
    Marker("fit", re.compile(r"all initialize finished, ready to fit")),
)
FIRST_STEP = "first_step"

# (phase, from marker, to marker): consecutive, so the phases add up to the first step's time
PHASES: tuple[tuple[str, str, str], ...] = (
    ("driver imports, config, data", "start", "ray_init"),
    ("ray start", "ray_init", "ray_up"),
    ("task runner up", "ray_up", "task_runner"),
    ("task runner setup", "task_runner", "dataloader"),
    ("worker group", "dataloader", "worker_group"),
    ("model load", "worker_group", "model_loaded"),
    ("reward", "model_loaded", "reward_ready"),
    ("vllm engine", "reward_ready", "rollout_ready"),
    ("ready to fit", "rollout_ready", "fit"),
    ("first step", "fit", FIRST_STEP),
)


def split_timed(line: str) -> tuple[float, str] | None:
    """(seconds, text) of a timed log line; None for a line without the time prefix."""
    m = TIMED_LINE.match(line.rstrip("\n"))
    return (float(m[1]), m[2]) if m else None


def marker_times(lines: Iterable[str]) -> dict[str, float]:
    """When each marker first appeared (seconds since process start); `start` is 0."""
    times: dict[str, float] = {"start": 0.0}
    for raw in lines:
        timed = split_timed(raw)
        if timed is None:
            continue
        t, text = timed
        for marker in MARKERS:
            if marker.name not in times and marker.pattern.search(text):
                times[marker.name] = t
        if FIRST_STEP not in times and (step := steplog.parse_step_line(text)) is not None and step.step == 1:
            times[FIRST_STEP] = t
    return times


def ours_parts(lines: Iterable[str]) -> dict[str, float]:
    """Pure: the seconds grpo-train reports for its own start-up parts (empty for a stock run)."""
    parts: dict[str, float] = {}
    for raw in lines:
        timed = split_timed(raw)
        text = timed[1] if timed else raw
        if m := OUR_PREPARED.search(text):
            parts |= {f"task runner: {name}": float(s) for name, s in PART_SECONDS.findall(m[1])}
        elif m := OUR_PART.search(text):
            parts[m[1]] = float(m[2])
    return parts


@dataclass(frozen=True)
class Breakdown:
    phases: dict[str, float | None]  # phase -> seconds (None: a marker is missing)
    first_step_s: float | None  # process start -> step 1 line
    first_generation_s: float | None  # verl's timing_s/gen of step 1
    ours: dict[str, float] = field(default_factory=dict)  # grpo-train's own parts (ours_parts)

    @property
    def accounted_s(self) -> float:
        return sum(v for v in self.phases.values() if v is not None)


def breakdown(lines: list[str]) -> Breakdown:
    """Pure: the start-up phases of one run's timed log."""
    times = marker_times(lines)
    phases: dict[str, float | None] = {}
    for phase, start, end in PHASES:
        a, b = times.get(start), times.get(end)
        phases[phase] = round(b - a, 1) if a is not None and b is not None else None
    texts = [timed[1] for timed in map(split_timed, lines) if timed is not None]
    step1 = next((s for s in steplog.parse_steps(texts) if s.step == 1), None)
    return Breakdown(
        phases=phases,
        first_step_s=round(times[FIRST_STEP], 1) if FIRST_STEP in times else None,
        first_generation_s=step1.get(steplog.GEN_TIME) if step1 else None,
        ours=ours_parts(lines),
    )


def table(runs: dict[str, Breakdown]) -> str:
    """A markdown table: one column per run, one row per phase, then the totals."""
    names = list(runs)
    lines = ["| phase (s) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for phase, _, _ in PHASES:
        lines.append(f"| {phase} | " + " | ".join(steplog.fmt(runs[n].phases.get(phase), 1) for n in names) + " |")
    lines.append(
        "| of which step 1's generation | "
        + " | ".join(steplog.fmt(runs[n].first_generation_s, 1) for n in names)
        + " |"
    )
    lines.append(
        "| **process start -> step 1 done** | "
        + " | ".join(f"**{steplog.fmt(runs[n].first_step_s, 1)}**" for n in names)
        + " |"
    )
    for part in dict.fromkeys(p for n in names for p in runs[n].ours):
        lines.append(
            f"| grpo-train: {part} | " + " | ".join(steplog.fmt(runs[n].ours.get(part), 1) for n in names) + " |"
        )
    return "\n".join(lines)
