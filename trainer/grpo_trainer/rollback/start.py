"""The start of a rolled-back attempt, in the driver before verl starts (docs/guardrails.md, "Rollback on
the checkpoint volume").

verl's resume_mode=auto resumes from the step in `<root>/latest_checkpointed_iteration.txt`. A rollback to
step K therefore (1) moves every `global_step_N` with N > K aside into `<root>/.grpo/rolled-back/attempt-<A-1>/`
(never deleted: they are the evidence of what went wrong), (2) points the tracker at K, (3) pins K so no
pruning removes it, and (4) writes a marker, `<root>/.grpo/rollback-attempt-<A>.json`. A KubeRay retry of the
same attempt finds the marker and leaves the directories alone: it resumes from whatever this attempt saved.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.export.layout import LATEST_FILE
from grpo_trainer.rollback.pins import STATE_DIR, pin_step, saved_steps, step_dir_step
from grpo_trainer.rollback.request import ROLLBACK_ENV, RollbackRequest, request_from_env

log = logging.getLogger(__name__)

ROLLED_BACK_DIR = "rolled-back"
LEARNING_RATE_KEY = "actor_rollout_ref.actor.optim.lr"
KL_COEF_KEY = "actor_rollout_ref.actor.kl_loss_coef"
STRATEGY_KEY = "actor_rollout_ref.actor.strategy"
# The actor strategies whose checkpoint load grpo_trainer.rollback.learning_rate patches (FSDPCheckpointManager).
LR_PATCHED_STRATEGIES = ("fsdp", "fsdp2")


@dataclass(frozen=True)
class StartRecord:
    """What the start of one rolled-back attempt did; the marker file holds it as JSON."""

    attempt: int
    step: int
    detector: str
    moved_steps: list[int] = field(default_factory=list)
    moved_to: str = ""
    tracker_before: str | None = None
    requested_at: str | None = None


def marker_path(root: Path, attempt: int) -> Path:
    return root / STATE_DIR / f"rollback-attempt-{attempt}.json"


def rolled_back_dir(root: Path, attempt: int) -> Path:
    """Where the steps after the rollback point go: named for the attempt that saved them (the previous one)."""
    return root / STATE_DIR / ROLLED_BACK_DIR / f"attempt-{attempt - 1}"


def steps_after(root: Path, step: int) -> list[tuple[int, Path]]:
    """Every global_step_N directory with N > step, complete or not, oldest first."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = [(n, e) for e in entries if (n := step_dir_step(e.name)) is not None and e.is_dir()]
    return sorted((n, e) for n, e in found if n > step)


def unique_destination(dest: Path) -> Path:
    """`dest`, or `dest.1`, `dest.2`, ... when it is taken: an earlier rollback of the same attempt number
    (a GRPOJob re-created on the same volume) must not be overwritten."""
    candidate, i = dest, 0
    while candidate.exists():
        i += 1
        candidate = dest.with_name(f"{dest.name}.{i}")
    return candidate


def check_target(root: Path, step: int) -> None:
    """Step K's actor checkpoint must be on disk with its rank files (step 0 = the start, nothing to check)."""
    if step == 0 or step in saved_steps(root):
        return
    on_disk = saved_steps(root)
    raise GrpoConfigError(
        f"{ROLLBACK_ENV}.step: no checkpoint of step {step} at {root / f'global_step_{step}' / 'actor'} "
        f"(saved steps on disk: {on_disk or 'none'}). The operator names the newest checkpoint before the "
        "guardrail's onset; if it was removed by hand, suspend the job and resume it from a step that exists."
    )


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def point_tracker(root: Path, step: int, aside: Path) -> None:
    """verl resumes from the tracker's step; for step 0 there must be none (moved aside, not deleted)."""
    tracker = root / LATEST_FILE
    if step > 0:
        _write_atomic(tracker, str(step))
    elif tracker.exists():
        aside.mkdir(parents=True, exist_ok=True)
        tracker.replace(unique_destination(aside / LATEST_FILE))


def read_marker(marker: Path) -> StartRecord:
    try:
        return StartRecord(**json.loads(marker.read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise GrpoConfigError(
            f"{ROLLBACK_ENV}: the marker {marker} of this attempt's rollback is unreadable ({e}); move it aside "
            "to have the rollback redone (steps already moved stay where they are)"
        ) from None


def start_rollback(root: Path, request: RollbackRequest) -> tuple[StartRecord, bool]:
    """Roll the checkpoint directory back to request.step, once per attempt. Returns what was done and
    whether it was done now (False: a retry of the same attempt found the marker and did nothing)."""
    marker = marker_path(root, request.attempt)
    if marker.exists():
        done = read_marker(marker)
        # the same decision (a KubeRay retry of this attempt): leave the directories alone. Another one (a
        # GRPOJob re-created with this name, whose directory survived) is a rollback of its own.
        if done.requested_at == request.requested_at:
            return done, False
    check_target(root, request.step)
    aside = rolled_back_dir(root, request.attempt)
    tracker_before = _read_text(root / LATEST_FILE)
    moved = []
    for n, step_dir in steps_after(root, request.step):
        aside.mkdir(parents=True, exist_ok=True)
        step_dir.replace(unique_destination(aside / step_dir.name))  # same volume: a rename, not a copy
        moved.append(n)
    point_tracker(root, request.step, aside)
    if request.step > 0:
        pin_step(root, request.step)
    record = StartRecord(
        attempt=request.attempt,
        step=request.step,
        detector=request.detector,
        moved_steps=moved,
        moved_to=str(aside.relative_to(root)),
        tracker_before=tracker_before,
        requested_at=request.requested_at,
    )
    # last: a start cut short is redone by the retry (each step above is safe to repeat)
    _write_atomic(marker, json.dumps(asdict(record), sort_keys=True))
    return record, True


def describe(record: StartRecord, fresh: bool, lr_before: float, lr_after: float | None) -> str:
    """The line a user greps for: where the attempt resumes, why, what changed, what moved."""
    start = f"step {record.step}" if record.step else "the start (no checkpoint before the onset)"
    parts = [f"rollback attempt {record.attempt}: resuming from {start} (guardrail {record.detector})"]
    if lr_after is not None:
        parts.append(f"learning rate {lr_before:g} -> {lr_after:g}")
    if not fresh:
        parts.append("a retry of this attempt: checkpoint directory left as this attempt saved it")
    elif record.moved_steps:
        parts.append(f"moved steps {record.moved_steps} to {record.moved_to}")
    else:
        parts.append("no later steps to move")
    return "; ".join(parts)


def check_config(cfg: DictConfig, request: RollbackRequest) -> None:
    """What a rollback needs from the verl config: resuming on, and a checkpoint load we can set the lr after."""
    if str(cfg.trainer.resume_mode) != "auto":
        raise GrpoConfigError(
            f"{ROLLBACK_ENV} asks to resume from step {request.step}, but trainer.resume_mode is "
            f"{cfg.trainer.resume_mode!r}: set spec.checkpoints.resume to auto for a job whose guardrails act"
        )
    strategy = str(OmegaConf.select(cfg, STRATEGY_KEY, default="fsdp"))
    if request.learning_rate is not None and strategy not in LR_PATCHED_STRATEGIES:
        raise GrpoConfigError(
            f"{ROLLBACK_ENV}.learningRate: the learning rate is set after the checkpoint load only for "
            f"{STRATEGY_KEY} in {LR_PATCHED_STRATEGIES} (got {strategy!r}); use "
            "spec.guardrails.rollback.change=klCoef for this job"
        )


def apply_overrides(cfg: DictConfig, request: RollbackRequest) -> None:
    """The config's lr and KL coefficient: what verl builds the optimizer with. After a resume verl restores
    the checkpoint's lr, so the workers set it again after the load (grpo_trainer.rollback.learning_rate)."""
    if request.learning_rate is not None:
        OmegaConf.update(cfg, LEARNING_RATE_KEY, request.learning_rate, merge=False)
    if request.kl_loss_coef is not None:
        OmegaConf.update(cfg, KL_COEF_KEY, request.kl_loss_coef, merge=False)


def apply_rollback(
    cfg: DictConfig, environ: Mapping[str, str], strict: bool, warnings: list[str]
) -> RollbackRequest | None:
    """The config for a rolled-back attempt; with strict (a real start) the checkpoint directory too.
    Runs before grpo_trainer.resume.apply_resume: the rolled-back tracker is this job's own checkpoint,
    which wins over a warm start."""
    request = request_from_env(environ)
    if request is None:
        return None
    check_config(cfg, request)
    lr_before = float(OmegaConf.select(cfg, LEARNING_RATE_KEY))
    apply_overrides(cfg, request)
    if not strict:
        warnings.append(f"{ROLLBACK_ENV}: the checkpoint directory is rolled back at start-up, not in a dry run")
        return request
    record, fresh = start_rollback(Path(str(cfg.trainer.default_local_dir)), request)
    log.info("%s", describe(record, fresh, lr_before, request.learning_rate))
    return request
