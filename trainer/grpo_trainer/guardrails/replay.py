"""Replay a recorded steps file through the guardrails, offline (e.g. a GPU run's grpo.metrics.stepsFile):

    python -m grpo_trainer.guardrails.replay STEPS.jsonl[.gz] [--config JSON] [--verbose]

Prints one line per step (its tripped detectors, or ok / warming) and the reason when one trips, then a
summary. Exit status 0 whatever it finds (2 for a bad file or configuration): it reports, it does not judge.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from grpo_trainer.guardrails.config import GuardrailsConfigError, parse_config
from grpo_trainer.guardrails.guardrails import Guardrails
from grpo_trainer.guardrails.sample import DetectorState, Status
from grpo_trainer.progress.step_metrics import extract

# step_file.plain writes a NaN loss as the string "nan" (JSON has no NaN): read it back as the number
_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def revive(record: dict[str, Any]) -> dict[str, Any]:
    return {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in record.items()}


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield revive(json.loads(line))


def step_line(step: int, states: Iterable[DetectorState], new: set[str]) -> str:
    states = list(states)
    tripped = [s for s in states if s.status is Status.TRIPPED]
    if tripped:
        text = ", ".join(f"{s.name} (onset {s.onset_step})" + (" NEW" if s.name in new else "") for s in tripped)
        return f"step {step}: tripped {text}"
    warming = [s.name for s in states if s.status is Status.WARMING]
    return f"step {step}: " + (f"warming {', '.join(warming)}" if warming else "ok")


def replay(records: Iterable[dict[str, Any]], guardrails: Guardrails, out: TextIO, verbose: bool = False) -> int:
    """Feed each record; print as it goes; the number of detectors that tripped."""
    for record in records:
        step = int(record.get("step", record.get("training/global_step", 0)))
        before = {s.name for s in guardrails.tripped()}
        states = guardrails.observe(extract(record, step))
        new = {s.name for s in states if s.tripped} - before
        print(step_line(step, states, new), file=out)
        for s in states:
            if s.name in new or verbose:
                print(f"  {s.name} [{s.status.value}]: {s.reason}", file=out)
    trips = guardrails.tripped()
    summary = "; ".join(f"{s.name} at step {s.tripped_step} (onset {s.onset_step})" for s in trips) or "none"
    print(f"mode {guardrails.mode}; trips: {summary}", file=out)
    return len(trips)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_trainer.guardrails.replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("steps", type=Path, help="a steps file: JSON lines, one verl metrics dict per step (.gz ok)")
    parser.add_argument("--config", default=None, help='guardrails configuration as JSON, e.g. {"warmupSteps": 30}')
    parser.add_argument("--verbose", action="store_true", help="every detector's reason at every step")
    args = parser.parse_args(argv)
    try:
        guardrails = Guardrails(parse_config(args.config))
        replay(read_records(args.steps), guardrails, sys.stdout, args.verbose)
    except (GuardrailsConfigError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
