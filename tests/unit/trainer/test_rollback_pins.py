from pathlib import Path

from grpo_trainer.rollback.pins import pin_file, pin_step, pinned_steps, rollback_step, saved_steps, step_of


def _save(root: Path, step: int, rank_file: bool = True) -> None:
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    if rank_file:
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x")


def test_rollback_step_is_newest_checkpoint_before_onset(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step)
    assert rollback_step(tmp_path, onset_step=30) == 20
    assert rollback_step(tmp_path, onset_step=31) == 30
    assert rollback_step(tmp_path, onset_step=10) is None


def test_incomplete_checkpoint_is_not_a_rollback_target(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    _save(tmp_path, 20, rank_file=False)  # a save cut short: no rank files
    assert saved_steps(tmp_path) == [10]
    assert rollback_step(tmp_path, onset_step=25) == 10


def test_pins_accumulate_and_survive_a_bad_file(tmp_path: Path) -> None:
    assert pinned_steps(tmp_path) == set()
    pin_step(tmp_path, 20)
    pin_step(tmp_path, 10)
    assert pinned_steps(tmp_path) == {10, 20}
    pin_file(tmp_path).write_text("{not json")
    assert pinned_steps(tmp_path) == set()


def test_step_of_reads_step_and_actor_dirs() -> None:
    assert step_of(Path("/c/global_step_7")) == 7
    assert step_of(Path("/c/global_step_7/actor")) == 7
    assert step_of(Path("/c/other")) is None
