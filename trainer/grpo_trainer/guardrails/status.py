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


def _numbers(values: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, raw in values.items() if (v := _num(raw)) is not None}


def detector_entry(s: DetectorState) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": s.name, "status": s.status.value, "step": s.step, "reason": s.reason}
    for key, value in (("value", s.value), ("baseline", s.baseline)):
        if (v := _num(value)) is not None:
            entry[key] = v
    if s.onset_step is not None:
        entry["onsetStep"] = s.onset_step
        entry["trippedStep"] = s.tripped_step
    if s.extra and (values := _numbers(s.extra)):
        entry["values"] = values
    return entry


def guardrails_section(
    mode: str, states: Iterable[DetectorState], baselines: Mapping[str, Mapping[str, float]]
) -> dict[str, Any]:
    """Pure: the value of status.progress.guardrails."""
    states = list(states)
    return {
        "mode": mode,
        "tripped": [s.name for s in states if s.tripped],
        "detectors": [detector_entry(s) for s in states],
        "baselines": {name: _numbers(b) for name, b in baselines.items() if b},
    }


def error_section(error: str) -> dict[str, Any]:
    """What the status says when the configuration was refused: guardrails are off, and why."""
    return {"mode": "off", "error": error, "tripped": [], "detectors": []}
