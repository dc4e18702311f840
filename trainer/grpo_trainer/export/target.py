"""The target directory: what is already there, whether it fits, and an all-or-nothing publish.

The model is written into a hidden sibling directory (same filesystem, so the final ``rename`` is
atomic) and only renamed onto the target once complete, fsynced and, with --verify, checked. A
crash leaves at most the hidden temp directory, which the next run removes; never a half model
under the published name.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from grpo_trainer.export.errors import ExportError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# Disk check headroom: config/tokenizer files and filesystem metadata.
HEADROOM_BYTES = 64 * 2**20


@dataclass(frozen=True)
class TargetState:
    path: Path
    exists: bool
    has_weights: bool
    is_empty: bool


def inspect_target(target: Path) -> TargetState:
    if not target.exists():
        return TargetState(target, False, False, True)
    if not target.is_dir():
        raise ExportError(
            "TargetNotADirectory",
            f"Target {target} exists and is not a directory.",
            "Choose a directory path for --target.",
        )
    if os.path.ismount(target):
        raise ExportError(
            "TargetIsMountPoint",
            f"Target {target} is a mount point; the export is published by renaming a finished directory "
            "onto the target, which cannot replace a mount point.",
            "Use a subdirectory of the volume, e.g. --target /export/<job-name>.",
        )
    entries = list(target.iterdir())
    has_weights = any(p.name.endswith(WEIGHT_SUFFIXES) or p.name.endswith(".index.json") for p in entries)
    return TargetState(target, True, has_weights, not entries)


def check_disk(target: Path, needed: int) -> None:
    """Refuse before writing anything when the target filesystem cannot hold the output."""
    probe = target if target.exists() else target.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed + HEADROOM_BYTES:
        raise ExportError(
            "InsufficientDisk",
            f"The export needs {human(needed + HEADROOM_BYTES)} on the filesystem of {probe}, but only "
            f"{human(free)} is free.",
            "Free space on the target volume, grow the PVC, or write smaller weights (--dtype bf16).",
        )


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n} B"


def temp_dir_for(target: Path) -> Path:
    return target.parent / f".{target.name}.grpo-export-tmp-{os.getpid()}"


def remove_stale_temps(target: Path) -> list[Path]:
    """Temp dirs of earlier crashed runs (a Job retry) would only waste the volume's space."""
    prefix = f".{target.name}.grpo-export-"
    stale = [p for p in target.parent.glob(prefix + "*") if p.is_dir()] if target.parent.exists() else []
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def publish(tmp: Path, target: Path, durable: bool = True) -> None:
    """Make ``tmp`` the target. An existing target (empty, or --overwrite) is moved aside first.

    With ``durable``, the small files (index, config, tokenizer, card) are flushed too (the shards
    were flushed as they were finished), then the directory entries, so after a node crash the
    target is either absent, the old one, or complete.
    """
    if durable:
        for p in tmp.iterdir():
            if p.is_file() and not p.name.endswith(".safetensors"):
                _fsync_file(p)
        _fsync_dir(tmp)
    if target.exists():
        old = target.parent / f".{target.name}.grpo-export-old-{os.getpid()}"
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, target)
    if durable:
        _fsync_dir(target.parent)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def existing_weight_map(target: Path) -> dict[str, Path] | None:
    """Tensor name -> file for a safetensors model in ``target``; None if it is another format."""
    index = target / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        return {k: target / v for k, v in weight_map.items()}
    single = target / "model.safetensors"
    if single.exists():
        from safetensors import safe_open

        with safe_open(str(single), framework="pt") as f:
            return dict.fromkeys(f.keys(), single)
    return None
