"""Checkpoints a guardrail rollback needs, kept safe from `checkpoints.keep` pruning.

The pin file lives beside the checkpoints (`<root>/.grpo/pinned.json`, `{"steps": [N, ...]}`) so every
process that prunes (verl's actor workers) and every later attempt sees the same pins. Pins are only
ever added: a pinned checkpoint stays until a person deletes it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

STATE_DIR = ".grpo"
PIN_FILE = "pinned.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_RANK_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


def pin_file(root: Path) -> Path:
    return root / STATE_DIR / PIN_FILE


def pinned_steps(root: Path) -> set[int]:
    """The pinned steps; an unreadable or malformed file pins nothing (and is left for a person to see)."""
    try:
        data = json.loads(pin_file(root).read_text())
    except (OSError, ValueError):
        return set()
    steps = data.get("steps") if isinstance(data, dict) else None
    return {s for s in steps if isinstance(s, int) and not isinstance(s, bool)} if isinstance(steps, list) else set()


def pin_step(root: Path, step: int) -> None:
    """Add `step` to the pins (atomic replace: a reader never sees half a file)."""
    steps = pinned_steps(root) | {int(step)}
    path = pin_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{PIN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"steps": sorted(steps)}))
    tmp.replace(path)


def step_dir_step(name: str) -> int | None:
    """N for a directory named `global_step_N`; None for any other name."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def step_of(path: Path) -> int | None:
    """N for `<root>/global_step_N` or `<root>/global_step_N/actor`; None for anything else."""
    for part in (path.name, path.parent.name):
        if (step := step_dir_step(part)) is not None:
            return step
    return None


def saved_steps(root: Path) -> list[int]:
    """Steps whose actor checkpoint is on disk with its rank files, oldest first."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    steps = []
    for entry in entries:
        m = _STEP_DIR.match(entry.name)
        actor = entry / "actor"
        if m and actor.is_dir() and any(_RANK_FILE.match(p.name) for p in actor.iterdir()):
            steps.append(int(m.group(1)))
    return sorted(steps)


def rollback_step(root: Path, onset_step: int) -> int | None:
    """The newest saved checkpoint from before the trouble began (step < onset), None when there is none."""
    before = [s for s in saved_steps(root) if s < onset_step]
    return before[-1] if before else None
