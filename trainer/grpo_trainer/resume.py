"""Where a run starts: the job's own latest checkpoint, else a warm start (`grpo.checkpoints.resumeFrom`).

verl 0.9.1 has one switch for this: ``trainer.resume_mode=auto`` resumes from the latest checkpoint
in ``trainer.default_local_dir`` (the job's own directory, /checkpoints) and ignores
``resume_from_path``; ``resume_mode=resume_path`` always starts from ``resume_from_path``. A warm-started
job needs both: the other job's checkpoint for its first attempt, its own latest for every retry after
a checkpoint was saved. So the choice is made here, at each start, from what the directories hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.layout import LATEST_FILE, resolve_actor_dir
from grpo_trainer.settings import ResumeFromSettings


@dataclass(frozen=True)
class StartPoint:
    """What verl is told: resume_mode and, for a warm start, the global_step_N directory."""

    resume_mode: str
    resume_from_path: str | None = None
    reason: str = ""


def own_latest_step(checkpoint_dir: Path) -> int | None:
    """The step verl's resume_mode=auto would resume from (its tracker file), None when there is none."""
    tracker = checkpoint_dir / LATEST_FILE
    try:
        text = tracker.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and (checkpoint_dir / f"global_step_{text}").is_dir() else None


def warm_start_dir(source: ResumeFromSettings) -> Path:
    """The source's global_step_N directory (N = source.step, else its latest), checked for rank files."""
    root = Path(source.dir)
    where = root / f"global_step_{source.step}" if source.step is not None else root
    try:
        actor = resolve_actor_dir(where)
    except ExportError as exc:
        raise GrpoConfigError(
            f"grpo.checkpoints.resumeFrom: no checkpoint to start from at {where}: {exc.problem} "
            "Fix spec.checkpoints.resumeFrom (jobName or path, claimName, step) to name a saved checkpoint."
        ) from exc
    return actor.parent


def choose_start(resume_mode: str, checkpoint_dir: Path, source: ResumeFromSettings | None) -> StartPoint:
    """The job's own latest checkpoint wins; a warm start only when it has none (see the module docstring)."""
    if resume_mode != "auto" or source is None:
        return StartPoint(resume_mode)
    own = own_latest_step(checkpoint_dir)
    if own is not None:
        return StartPoint("auto", reason=f"resuming this job's own step {own}; resumeFrom is only for its first start")
    step_dir = warm_start_dir(source)
    return StartPoint("resume_path", str(step_dir), reason=f"warm start from {step_dir}")


def apply_resume(cfg: DictConfig, source: ResumeFromSettings | None, strict: bool, warnings: list[str]) -> None:
    """Set trainer.resume_mode/resume_from_path; a dry run (strict=False) leaves them and says why."""
    if source is None:
        return
    if not strict:
        warnings.append(f"grpo.checkpoints.resumeFrom ({source.dir}) is chosen at start-up, not in a dry run")
        return
    start = choose_start(str(cfg.trainer.resume_mode), Path(str(cfg.trainer.default_local_dir)), source)
    OmegaConf.update(cfg, "trainer.resume_mode", start.resume_mode, merge=False)
    if start.resume_from_path is not None:
        OmegaConf.update(cfg, "trainer.resume_from_path", start.resume_from_path, merge=False)
    if start.reason:
        warnings.append(start.reason)
