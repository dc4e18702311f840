"""The start of a rolled-back attempt: later steps moved aside (never deleted), the tracker at K, K pinned,
once per attempt; the config resumes with the requested lr and KL coefficient."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.resume import apply_resume, own_latest_step
from grpo_trainer.rollback.pins import pinned_steps
from grpo_trainer.rollback.request import RollbackRequest
from grpo_trainer.rollback.start import apply_rollback, marker_path, start_rollback
from grpo_trainer.settings import ResumeFromSettings
from omegaconf import DictConfig, OmegaConf

TRACKER = "latest_checkpointed_iteration.txt"


def _save(root: Path, step: int) -> None:
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(f"weights of {step}".encode())
    (root / TRACKER).write_text(str(step))


def _request(step: int, attempt: int = 2, lr: float | None = 5e-7, kl: float | None = None) -> RollbackRequest:
    return RollbackRequest(attempt=attempt, step=step, detector="grad_spike", learning_rate=lr, kl_loss_coef=kl)


def _env(request: RollbackRequest) -> dict[str, str]:
    return {"GRPO_ROLLBACK": request.model_dump_json(by_alias=True)}


def _cfg(root: Path, resume_mode: str = "auto", strategy: str = "fsdp") -> DictConfig:
    return OmegaConf.create({
        "trainer": {"default_local_dir": str(root), "resume_mode": resume_mode, "resume_from_path": None},
        "actor_rollout_ref": {"actor": {"strategy": strategy, "optim": {"lr": 1e-6}, "kl_loss_coef": 0.001}},
    })


def test_later_steps_move_aside_and_verl_resumes_from_k(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        _save(tmp_path, step)
    record, fresh = start_rollback(tmp_path, _request(20))
    assert fresh and record.moved_steps == [30, 40]
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_10", "global_step_20"]
    aside = tmp_path / ".grpo" / "rolled-back" / "attempt-1"
    assert (aside / "global_step_40" / "actor" / "model_world_size_1_rank_0.pt").read_bytes() == b"weights of 40"
    assert own_latest_step(tmp_path) == 20  # what verl's resume_mode=auto reads
    assert pinned_steps(tmp_path) == {20}
    assert json.loads(marker_path(tmp_path, 2).read_text())["tracker_before"] == "40"


def test_a_retry_of_the_same_attempt_leaves_what_it_saved(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step)
    start_rollback(tmp_path, _request(10))
    _save(tmp_path, 15)  # the rolled-back attempt trains on and saves, then its pod dies
    record, fresh = start_rollback(tmp_path, _request(10))
    assert not fresh and record.moved_steps == [20, 30]
    assert own_latest_step(tmp_path) == 15
    assert (tmp_path / "global_step_15").is_dir()


def test_another_decision_with_the_same_attempt_number_is_a_rollback_of_its_own(tmp_path: Path) -> None:
    # a GRPOJob deleted (its Retain volume kept) and created again with the same name: its first rollback is
    # attempt 2 as well, and must not be taken for a retry of the old job's
    for step in (10, 20, 30):
        _save(tmp_path, step)
    old = RollbackRequest(attempt=2, step=10, detector="grad_spike", requested_at="2026-12-01T00:00:00Z")
    start_rollback(tmp_path, old)
    for step in (20, 30, 40):
        _save(tmp_path, step)  # the new job trained on from 10 and saved again
    new = RollbackRequest(attempt=2, step=20, detector="kl_runaway", requested_at="2026-12-04T00:00:00Z")
    record, fresh = start_rollback(tmp_path, new)
    assert fresh and record.moved_steps == [30, 40] and own_latest_step(tmp_path) == 20
    assert start_rollback(tmp_path, new)[1] is False  # and a retry of that one is a retry


def test_an_unreadable_marker_says_what_to_do(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    marker_path(tmp_path, 2).parent.mkdir(parents=True)
    marker_path(tmp_path, 2).write_text("{cut short")
    with pytest.raises(GrpoConfigError, match=r"rollback-attempt-2\.json .* move it aside"):
        start_rollback(tmp_path, _request(10))


def test_a_taken_destination_gets_a_suffix_and_nothing_is_overwritten(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    _save(tmp_path, 20)
    taken = tmp_path / ".grpo" / "rolled-back" / "attempt-1" / "global_step_20"
    taken.mkdir(parents=True)
    (taken / "older.txt").write_text("an earlier job's step 20")
    start_rollback(tmp_path, _request(10))
    assert (taken / "older.txt").read_text() == "an earlier job's step 20"
    assert (taken.with_name("global_step_20.1") / "actor" / "model_world_size_1_rank_0.pt").exists()


def test_a_missing_target_names_the_field_and_what_is_on_disk(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    (tmp_path / "global_step_20" / "actor").mkdir(parents=True)  # a save cut short: no rank files
    with pytest.raises(GrpoConfigError, match=r"GRPO_ROLLBACK\.step: no checkpoint of step 20 .*\[10\]"):
        start_rollback(tmp_path, _request(20))
    assert not marker_path(tmp_path, 2).exists()


def test_step_zero_starts_over_with_the_tracker_moved_aside(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    record, _ = start_rollback(tmp_path, _request(0))
    assert record.moved_steps == [10]
    assert own_latest_step(tmp_path) is None and not (tmp_path / TRACKER).exists()
    assert (tmp_path / ".grpo" / "rolled-back" / "attempt-1" / TRACKER).read_text() == "10"
    assert pinned_steps(tmp_path) == set()


def test_config_takes_the_requested_settings_and_logs_what_changed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step)
    cfg = _cfg(tmp_path)
    caplog.set_level(logging.INFO, logger="grpo_trainer")
    apply_rollback(cfg, _env(_request(10, kl=0.002)), strict=True, warnings=[])
    assert cfg.actor_rollout_ref.actor.optim.lr == 5e-7
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.002
    assert (
        "rollback attempt 2: resuming from step 10 (guardrail grad_spike); learning rate 1e-06 -> 5e-07; "
        "moved steps [20, 30] to .grpo/rolled-back/attempt-1" in caplog.text
    )


def test_null_settings_are_left_as_configured(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    cfg = _cfg(tmp_path)
    apply_rollback(cfg, _env(_request(10, lr=None)), strict=True, warnings=[])
    assert (cfg.actor_rollout_ref.actor.optim.lr, cfg.actor_rollout_ref.actor.kl_loss_coef) == (1e-6, 0.001)


def test_a_rollback_needs_resume_auto(tmp_path: Path) -> None:
    with pytest.raises(GrpoConfigError, match=r"spec\.checkpoints\.resume to auto"):
        apply_rollback(_cfg(tmp_path, resume_mode="disable"), _env(_request(10)), strict=True, warnings=[])


def test_a_new_lr_needs_a_checkpoint_load_we_patch(tmp_path: Path) -> None:
    with pytest.raises(GrpoConfigError, match=r"GRPO_ROLLBACK\.learningRate: .*megatron"):
        apply_rollback(_cfg(tmp_path, strategy="megatron"), _env(_request(10)), strict=True, warnings=[])


def test_a_dry_run_changes_the_config_but_not_the_directory(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    _save(tmp_path, 20)
    warnings: list[str] = []
    cfg = _cfg(tmp_path)
    apply_rollback(cfg, _env(_request(10)), strict=False, warnings=warnings)
    assert cfg.actor_rollout_ref.actor.optim.lr == 5e-7
    assert own_latest_step(tmp_path) == 20 and "not in a dry run" in warnings[0]


def test_the_rolled_back_checkpoint_wins_over_a_warm_start(tmp_path: Path) -> None:
    _save(tmp_path / "source", 100)
    own = tmp_path / "own"
    for step in (10, 20):
        _save(own, step)
    cfg = _cfg(own)
    apply_rollback(cfg, _env(_request(10)), strict=True, warnings=[])
    apply_resume(cfg, ResumeFromSettings(dir=str(tmp_path / "source")), strict=True, warnings=[])
    assert (cfg.trainer.resume_mode, cfg.trainer.resume_from_path) == ("auto", None)


def test_the_ray_workers_get_the_rollback_and_a_bad_one_is_refused_at_start_up() -> None:
    from grpo_trainer.config import worker_env
    from grpo_trainer.settings import GrpoSettings

    env = _env(_request(10))
    assert worker_env(GrpoSettings(), env)["GRPO_ROLLBACK"] == env["GRPO_ROLLBACK"]
    assert "GRPO_ROLLBACK" not in worker_env(GrpoSettings(), {})
    with pytest.raises(GrpoConfigError, match=r"GRPO_ROLLBACK\.step"):
        worker_env(GrpoSettings(), {"GRPO_ROLLBACK": '{"attempt": 2, "step": -1, "detector": "x"}'})
