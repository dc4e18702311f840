"""Checkpoints a rollback may still need, kept from verl's `max_actor_ckpt_to_keep` pruning.

verl 0.9.1 prunes in each actor worker process: BaseCheckpointManager.register_checkpoint (after a save)
and ensure_checkpoint_capacity (before one) hand the oldest of `previous_saved_paths` to
remove_previous_save_local_path, then drop them from the list. With guardrails acting, a detector that
trips at step T has its onset at T - H + 1 or later (H = protection_horizon), and the rollback goes to the
newest checkpoint before the onset. So, with `newest` the newest saved step, a step is never removed when
  (a) it is pinned (grpo_trainer.rollback.pins: a rollback's target),
  (b) it is newer than newest - H (the onset may still come after it), or
  (c) it is the newest step at or before newest - H (the target of a trip whose onset is the earliest).
A held-back path goes back into previous_saved_paths, so a later save prunes it once it no longer needs
protection: nothing leaks, and the volume holds at most `keep` + the protected steps.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_trainer.rollback.pins import pinned_steps, step_dir_step, step_of

CHECKPOINT_MODULE = "verl.utils.checkpoint.checkpoint_manager"
PATCHED = "__grpo_original__"
_HELD = "_grpo_held_back"


def prunable(
    candidates: Iterable[int], newest: int, horizon: int, pinned: Collection[int], others: Iterable[int] = ()
) -> set[int]:
    """Pure: the candidate steps that may be removed. `others` are saved steps verl keeps anyway: one of
    them may be the step (c) protects, which then frees every older candidate."""
    steps = set(candidates)
    free = steps - set(pinned)
    if horizon <= 0:
        return free
    settled = newest - horizon
    target = max((s for s in (*steps, *others) if s <= settled), default=None)
    return {s for s in free if s <= settled and s != target}


def checkpoint_root(path: Path) -> Path:
    """The directory holding global_step_N (and .grpo/pinned.json) for `.../global_step_N[/actor]`."""
    return path.parent if step_dir_step(path.name) is not None else path.parent.parent


def held_back(paths: list[str], tracked: list[str], horizon: int) -> list[str]:
    """Which of the paths verl is about to remove must stay, given every path the manager tracks."""
    by_root: dict[Path, dict[str, int]] = {}
    for p in {*tracked, *paths}:
        step = step_of(Path(p))
        if step is not None:  # a path we cannot read a step from is verl's business
            by_root.setdefault(checkpoint_root(Path(os.path.abspath(p))), {})[p] = step
    keep = []
    for root, steps in by_root.items():
        candidates = {p: s for p, s in steps.items() if p in paths}
        others = [s for p, s in steps.items() if p not in candidates]
        free = prunable(candidates.values(), max(steps.values()), horizon, pinned_steps(root), others)
        keep += [p for p, s in candidates.items() if s not in free]
    return sorted(keep, key=paths.index)


def install(module: ModuleType, horizon: int) -> None:
    """Patch the module's BaseCheckpointManager (once) so its pruning follows the rule above."""
    manager = module.BaseCheckpointManager
    original_remove = manager.remove_previous_save_local_path
    if hasattr(original_remove, PATCHED):
        return

    @functools.wraps(original_remove)
    def remove_previous_save_local_path(self: Any, path: str | list[str]) -> None:
        paths = [path] if isinstance(path, str) else list(path)
        keep = held_back(paths, list(self.previous_saved_paths), horizon)
        getattr(self, _HELD, []).extend(keep)  # read back by the caller's wrapper below
        original_remove(self, [p for p in paths if p not in keep])

    def keeping_held_back(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            setattr(self, _HELD, [])
            try:
                return original(self, *args, **kwargs)
            finally:
                held = getattr(self, _HELD)
                delattr(self, _HELD)
                # verl dropped them from its list after "removing" them; they were its oldest, so they
                # go back in front, where the next save offers them for pruning again
                back = [p for p in held if p not in self.previous_saved_paths]
                self.previous_saved_paths = [*back, *self.previous_saved_paths]

        setattr(wrapper, PATCHED, original)
        return wrapper

    setattr(remove_previous_save_local_path, PATCHED, original_remove)
    manager.remove_previous_save_local_path = remove_previous_save_local_path
    manager.register_checkpoint = keeping_held_back(manager.register_checkpoint)
    manager.ensure_checkpoint_capacity = keeping_held_back(manager.ensure_checkpoint_capacity)


def install_from_env(module: ModuleType, environ: Mapping[str, str]) -> None:
    """The worker_setup callback: protect checkpoints only when the job's guardrails act."""
    from grpo_trainer.guardrails.config import ENV_VAR, acts, parse_config, protection_horizon

    config = parse_config(environ.get(ENV_VAR))
    if acts(config):
        install(module, protection_horizon(config))
