"""The learning rate a rolled-back attempt asked for, in effect after verl's checkpoint load.

verl 0.9.1 builds the optimizer from the config (where grpo_trainer.rollback.start put the new lr), then
resume_mode=auto loads the checkpoint: FSDPCheckpointManager.load_checkpoint restores the optimizer's
param_groups (lr, initial_lr) and the LR scheduler's state (base_lrs, last_epoch) as they were saved,
which silently undoes the new lr. So the base lr is set again right after that load: every param group's
lr and initial_lr and the scheduler's base_lrs are scaled by requested / current base lr. Scaling all of
them, not only group["lr"], is what survives the next scheduler.step() (a LambdaLR recomputes lr as
base_lrs x lambda(step)), and it keeps a warm-up or cosine schedule's shape at the step it resumes.

Both of verl 0.9.1's FSDP load paths end in FSDPCheckpointManager.load_checkpoint: the legacy
fsdp_workers module is gone in 0.9.1, and engine_workers' TrainingWorker calls the FSDP engine
(workers/engine/fsdp/transformer_impl.py), which calls the manager.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from grpo_trainer.rollback.request import request_from_env

FSDP_CHECKPOINT_MODULE = "verl.utils.checkpoint.fsdp_checkpoint_manager"
PATCHED = "__grpo_original__"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LrChange:
    before: float
    after: float

    @property
    def changed(self) -> bool:
        return not math.isclose(self.before, self.after, rel_tol=1e-12, abs_tol=0.0)


def base_lr(optimizer: Any, scheduler: Any | None) -> float:
    """The schedule's base lr (the lr it warms up to, decays from): the scheduler's first base_lrs,
    else the first group's initial_lr, else its lr (no scheduler: the lr is the base)."""
    base_lrs = getattr(scheduler, "base_lrs", None)
    if base_lrs:
        return float(base_lrs[0])
    group = optimizer.param_groups[0]
    return float(group.get("initial_lr", group["lr"]))


def set_base_lr(optimizer: Any, scheduler: Any | None, target: float) -> LrChange:
    """Scale the optimizer's and the scheduler's lrs so the base lr is `target`; a no-op when it already is
    (a retry loading a checkpoint saved at the new lr). Groups keep their ratios to each other."""
    before = base_lr(optimizer, scheduler)
    change = LrChange(before, target)
    if not change.changed:
        return change
    if before <= 0:
        raise ValueError(f"cannot scale a base learning rate of {before} to {target}: set it in the config instead")
    factor = target / before
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    if scheduler is not None and getattr(scheduler, "base_lrs", None):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
        if getattr(scheduler, "_last_lr", None):  # what get_last_lr() reports until the next step
            scheduler._last_lr = [lr * factor for lr in scheduler._last_lr]
    return change


def install(module: ModuleType, target: float) -> None:
    """Patch the module's FSDPCheckpointManager (once): after each load, the base lr is `target`."""
    manager = module.FSDPCheckpointManager
    original = manager.load_checkpoint
    if hasattr(original, PATCHED):
        return

    @functools.wraps(original)
    def load_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if self.optimizer is not None:  # a reference model has none: nothing trains at an lr
            change = set_base_lr(self.optimizer, self.lr_scheduler, target)
            if self.rank == 0:
                log.info("learning rate after checkpoint load: %g (was %g)", change.after, change.before)
        return result

    setattr(load_checkpoint, PATCHED, original)
    manager.load_checkpoint = load_checkpoint


def install_from_env(module: ModuleType, environ: Mapping[str, str]) -> None:
    """The worker_setup callback: patch only when GRPO_ROLLBACK asks for a learning rate."""
    request = request_from_env(environ)
    if request is not None and request.learning_rate is not None:
        install(module, request.learning_rate)
