"""verl 0.9.1's FSDP checkpoint layout on disk, found and checked before anything is read.

``FSDPCheckpointManager.save_checkpoint`` writes, per actor directory::

    <root>/latest_checkpointed_iteration.txt          (trainer, after a complete save)
    <root>/global_step_<N>/actor/model_world_size_<W>_rank_<R>.pt   (torch.save(model.state_dict()))
    <root>/global_step_<N>/actor/optim_world_size_<W>_rank_<R>.pt   (not needed here)
    <root>/global_step_<N>/actor/fsdp_config.json     {"FSDP_version": 1|2, "world_size": W}
    <root>/global_step_<N>/actor/huggingface/         config.json, generation_config.json, tokenizer
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from grpo_trainer.export.errors import ExportError

_MODEL_FILE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
LATEST_FILE = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class CheckpointLayout:
    actor_dir: Path
    step: int | None
    world_size: int
    fsdp_version: int | None
    rank_files: tuple[Path, ...]
    hf_dir: Path

    @property
    def source_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.rank_files)


def _has_rank_files(d: Path) -> bool:
    return d.is_dir() and any(_MODEL_FILE.match(p.name) for p in d.iterdir())


def _step_dirs(root: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            found[int(m.group(1))] = p
    return found


def resolve_actor_dir(path: Path) -> Path:
    """Accept an actor dir, a global_step_N dir, or the checkpoint root (latest step)."""
    if not path.exists():
        raise ExportError(
            "CheckpointNotFound",
            f"Checkpoint path {path} does not exist.",
            "Point --checkpoint at <root>/global_step_N/actor or at the checkpoint root.",
        )
    if _has_rank_files(path):
        return path
    if _has_rank_files(path / "actor"):
        return path / "actor"
    steps = _step_dirs(path)
    latest = path / LATEST_FILE
    if latest.exists():
        text = latest.read_text().strip()
        if not text.isdigit():
            raise ExportError(
                "CheckpointNotFound",
                f"{latest} holds {text!r}, not a step number.",
                "Pass the step directory explicitly: --checkpoint <root>/global_step_N/actor.",
            )
        step = int(text)
        actor = path / f"global_step_{step}" / "actor"
        if not _has_rank_files(actor):
            raise ExportError(
                "CheckpointNotFound",
                f"{latest} names step {step}, but {actor} holds no model_world_size_*_rank_*.pt files.",
                "Restore that step's files or pass an existing step: --checkpoint <root>/global_step_N/actor.",
            )
        return actor
    # No tracker file (e.g. async save): the highest complete-looking step wins.
    for step in sorted(steps, reverse=True):
        if _has_rank_files(steps[step] / "actor"):
            return steps[step] / "actor"
    raise ExportError(
        "CheckpointNotFound",
        f"No FSDP checkpoint under {path}: expected model_world_size_W_rank_R.pt files in it, in actor/, "
        "or in global_step_N/actor/.",
        "Point --checkpoint at the trainer's default_local_dir or at a global_step_N/actor directory.",
    )


def step_of(actor_dir: Path) -> int | None:
    for part in (actor_dir, *actor_dir.parents):
        m = _STEP_DIR.match(part.name)
        if m:
            return int(m.group(1))
    return None


def _read_fsdp_config(actor_dir: Path) -> tuple[int | None, int | None]:
    cfg = actor_dir / "fsdp_config.json"
    if not cfg.exists():
        return None, None
    try:
        data = json.loads(cfg.read_text())
        return (
            int(data["world_size"]) if "world_size" in data else None,
            int(data["FSDP_version"]) if "FSDP_version" in data else None,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ExportError(
            "CorruptCheckpoint",
            f"{cfg} is not valid JSON with a world_size: {exc}.",
            "Restore fsdp_config.json from the trainer run (rank 0 writes it).",
        ) from exc


def discover(path: Path) -> CheckpointLayout:
    """Find the actor dir and check the rank files form one complete world."""
    actor = resolve_actor_dir(path)
    by_world: dict[int, set[int]] = {}
    for p in actor.iterdir():
        m = _MODEL_FILE.match(p.name)
        if m:
            by_world.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    cfg_world, fsdp_version = _read_fsdp_config(actor)
    if cfg_world is None:
        if len(by_world) != 1:
            raise ExportError(
                "WorldSizeMismatch",
                f"{actor} has no fsdp_config.json and rank files for several world sizes {sorted(by_world)}.",
                "Remove the rank files of the runs that are not this checkpoint, or restore fsdp_config.json.",
            )
        world = next(iter(by_world))
    else:
        world = cfg_world
    others = sorted(w for w in by_world if w != world)
    if world not in by_world:
        raise ExportError(
            "WorldSizeMismatch",
            f"fsdp_config.json in {actor} says world_size={world}, but the rank files are for world size {others}.",
            "The checkpoint was mixed from different runs: restore the matching fsdp_config.json or rank files.",
        )
    if others:
        raise ExportError(
            "WorldSizeMismatch",
            f"{actor} holds rank files for world size {world} and also for {others}; one directory must hold one save.",
            "Delete the stale model_world_size_*_rank_*.pt files of the other world size.",
        )
    present = by_world[world]
    missing = sorted(set(range(world)) - present)
    extra = sorted(r for r in present if r >= world)
    if missing or extra:
        detail = f"missing ranks {missing}" if missing else f"unexpected ranks {extra}"
        raise ExportError(
            "MissingRanks",
            f"{actor}: world size {world} needs model_world_size_{world}_rank_0..{world - 1}.pt, {detail}.",
            "Copy the missing rank files from the node that wrote them, or export an earlier complete step.",
        )
    files = tuple(actor / f"model_world_size_{world}_rank_{r}.pt" for r in range(world))
    return CheckpointLayout(
        actor_dir=actor,
        step=step_of(actor),
        world_size=world,
        fsdp_version=fsdp_version,
        rank_files=files,
        hf_dir=actor / "huggingface",
    )
