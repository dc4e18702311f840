"""Every step's whole verl metrics dict as one JSON line (`grpo.metrics.stepsFile`).

Prometheus keeps only the latest value of the few numbers the dashboards use. A run whose health is
judged after the fact (issue 18's alert thresholds, a learning curve) needs all of verl's metrics at
every step: the file on the checkpoint volume keeps them, one line per step, in step order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plain(value: Any) -> Any:
    """Pure: a metric value as strict JSON: numbers stay numbers; NaN and infinities become the strings
    "nan", "inf", "-inf" (JSON has no such numbers, and a NaN loss is exactly what must not be lost);
    numpy/torch scalars become Python numbers; anything else becomes its str()."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):  # an array of more than one element
            return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return str(value)


def step_record(data: Mapping[str, Any], step: int) -> dict[str, Any]:
    """Pure: the JSON object written for one step: {"step": N, <every metric>: <value>}."""
    return {"step": int(step), **{str(k): plain(v) for k, v in data.items()}}


def append_step(path: Path, data: Mapping[str, Any], step: int) -> None:
    """Append one step's line (the file and its folder are created on the first step)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(step_record(data, step), sort_keys=False) + "\n")


def read_steps(path: Path) -> list[dict[str, Any]]:
    """The records of a steps file, in file order (the reader of what append_step wrote)."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
