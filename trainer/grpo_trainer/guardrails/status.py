"""`status.progress.guardrails`: each detector's state for people and for the operator (camelCase,
rounded), plus the baselines a resumed attempt restores."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from grpo_trainer.guardrails.sample import DetectorState


def _num(value: float | None) -> float | None:
    """6 significant digits (a KL of 3e-7 must not round to 0); None for what JSON cannot carry."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def numbers(values: Mapping[str, float | None]) -> dict[str, float]:
    return {k: v for k, raw in values.items() if (v := _num(raw)) is not None}


def detector_entry(s: DetectorState, mode: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": s.name,
        "mode": mode,
        "status": s.status.value,
        "step": s.step,
        "reason": s.reason,
    }
    for key, value in (("value", s.value), ("baseline", s.baseline)):
        if (v := _num(value)) is not None:
            entry[key] = v
    if s.onset_step is not None:
        entry["onsetStep"] = s.onset_step
        entry["trippedStep"] = s.tripped_step
    if s.extra and (values := numbers(s.extra)):
        entry["values"] = values
    return entry


def guardrails_section(
    mode: str,
    states: Iterable[DetectorState],
    baselines: Mapping[str, Mapping[str, float]],
    attempt: int = 1,
    modes: Mapping[str, str] | None = None,
    action: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Pure: the value of status.progress.guardrails. `modes`: each detector's effective mode (absent: the
    job's). `action` is always there, null when none: the status is merge-patched, so a new attempt must
    say null to clear the action an earlier attempt left."""
    states = list(states)
    modes = modes or {}
    return {
        "mode": mode,
        "attempt": attempt,
        "tripped": [s.name for s in states if s.tripped],
        "detectors": [detector_entry(s, modes.get(s.name, mode)) for s in states],
        "baselines": {name: numbers(b) for name, b in baselines.items() if b},
        "action": action,
    }


def error_section(error: str, attempt: int = 1) -> dict[str, Any]:
    """What the status says when the configuration was refused: guardrails are off, and why."""
    return {"mode": "off", "attempt": attempt, "error": error, "tripped": [], "detectors": [], "action": None}
