"""Where a run starts: its own latest checkpoint first, a warm start (resumeFrom) only when it has none."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.resume import apply_resume, choose_start, own_latest_step
from grpo_trainer.settings import ResumeFromSettings
from omegaconf import OmegaConf


def _save(root: Path, step: int, tracker: bool = True) -> Path:
    """A verl checkpoint as FSDPCheckpointManager lays it out (the rank file's content is not read here)."""
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor.parent


def test_own_latest_step_follows_the_tracker_file(tmp_path: Path) -> None:
    assert own_latest_step(tmp_path) is None
    _save(tmp_path, 50)
    _save(tmp_path, 100)
    assert own_latest_step(tmp_path) == 100


def test_first_start_is_a_warm_start_from_the_sources_latest(tmp_path: Path) -> None:
    source = tmp_path / "source"
    _save(source, 100)
    step_dir = _save(source, 200)
    start = choose_start("auto", tmp_path / "own", ResumeFromSettings(dir=str(source)))
    assert (start.resume_mode, start.resume_from_path) == ("resume_path", str(step_dir))


def test_a_named_step_is_used_instead_of_the_latest(tmp_path: Path) -> None:
    source = tmp_path / "source"
    step_dir = _save(source, 100)
    _save(source, 200)
    start = choose_start("auto", tmp_path / "own", ResumeFromSettings(dir=str(source), step=100))
    assert start.resume_from_path == str(step_dir)


def test_a_retry_resumes_the_jobs_own_checkpoint_not_the_warm_start(tmp_path: Path) -> None:
    _save(tmp_path / "source", 200)
    _save(tmp_path / "own", 250)
    start = choose_start("auto", tmp_path / "own", ResumeFromSettings(dir=str(tmp_path / "source")))
    assert (start.resume_mode, start.resume_from_path) == ("auto", None)
    assert "own step 250" in start.reason


def test_a_missing_warm_start_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "source").mkdir()
    with pytest.raises(GrpoConfigError) as refused:
        choose_start("auto", tmp_path / "own", ResumeFromSettings(dir=str(tmp_path / "source"), step=7))
    assert "spec.checkpoints.resumeFrom" in str(refused.value)
    assert "global_step_7" in str(refused.value)


def test_resume_disabled_ignores_everything(tmp_path: Path) -> None:
    _save(tmp_path / "source", 200)
    assert choose_start("disable", tmp_path, ResumeFromSettings(dir=str(tmp_path / "source"))).resume_mode == "disable"


def test_apply_resume_sets_verls_keys(tmp_path: Path) -> None:
    step_dir = _save(tmp_path / "source", 200)
    cfg = OmegaConf.create({"trainer": {"resume_mode": "auto", "resume_from_path": None,
                                        "default_local_dir": str(tmp_path / "own")}})
    warnings: list[str] = []
    apply_resume(cfg, ResumeFromSettings(dir=str(tmp_path / "source")), strict=True, warnings=warnings)
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("resume_path", str(step_dir))
    assert warnings == [f"warm start from {step_dir}"]
