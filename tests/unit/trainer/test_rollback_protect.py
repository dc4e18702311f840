"""verl's checkpoint pruning never removes what a rollback may still need: pinned steps, steps newer than
newest - H, and the newest step at or before newest - H; what is held back is pruned later."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from grpo_trainer.guardrails.config import acts, parse_config, protection_horizon
from grpo_trainer.rollback import protect
from grpo_trainer.rollback.pins import pin_step, saved_steps
from grpo_trainer.rollback.protect import prunable


def test_prunable_keeps_the_horizon_and_the_step_before_it() -> None:
    # saves every 5 steps, newest 40, H 8: 35 and 40 are inside the horizon, 30 is the newest <= 32
    assert prunable([5, 10, 20, 25, 30, 35], newest=40, horizon=8, pinned=set()) == {5, 10, 20, 25}
    assert prunable([5, 10, 20, 25, 30, 35], newest=40, horizon=8, pinned={10}) == {5, 20, 25}


def test_a_kept_step_before_the_horizon_frees_every_older_candidate() -> None:
    assert prunable([10, 20], newest=40, horizon=8, pinned=set(), others=[30, 40]) == {10, 20}


def test_without_a_horizon_only_pins_are_kept() -> None:
    assert prunable([5, 10], newest=40, horizon=0, pinned={5}) == {10}


def _targets_survive(save_every: int, horizon: int, last: int, keep_on_disk: Any) -> None:
    """At every save, a trip whose onset is anywhere in the horizon finds its rollback target on disk."""
    history: list[int] = []
    for newest in range(save_every, last + 1, save_every):
        history.append(newest)
        on_disk = keep_on_disk(history)
        for onset in range(newest - horizon + 1, newest + 1):
            target = max((s for s in history if s < onset), default=None)
            assert target is None or target in on_disk, (save_every, horizon, newest, onset, sorted(on_disk))


@pytest.mark.parametrize("save_every", [1, 3, 5, 8, 10])
@pytest.mark.parametrize("horizon", [1, 5, 8])
def test_every_possible_rollback_target_survives_pruning(save_every: int, horizon: int) -> None:
    on_disk: set[int] = set()

    def after_save(history: list[int]) -> set[int]:
        on_disk.add(history[-1])
        on_disk.difference_update(prunable(on_disk - {history[-1]}, history[-1], horizon, set(), [history[-1]]))
        return on_disk

    _targets_survive(save_every, horizon, 80, after_save)
    assert len(on_disk) <= horizon // save_every + 2  # and nothing else piles up


# ------------------------------------------------------------------------ through verl's own manager


@pytest.fixture(scope="module")
def process_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """BaseCheckpointManager asks torch.distributed for its rank: a one-process gloo group."""
    import torch.distributed as dist

    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _manager_module() -> SimpleNamespace:
    """A subclass of verl's BaseCheckpointManager saving as FSDPCheckpointManager does (capacity, files,
    register), in a namespace of its own: the patch goes on the subclass, verl's class stays as it is."""
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    class Manager(BaseCheckpointManager):
        def save_checkpoint(
            self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int = 0
        ) -> None:
            self.ensure_checkpoint_capacity(max_ckpt_to_keep)
            Path(local_path).mkdir(parents=True)
            (Path(local_path) / "model_world_size_1_rank_0.pt").write_bytes(b"x")
            self.register_checkpoint(local_path, max_ckpt_to_keep)

    return SimpleNamespace(BaseCheckpointManager=Manager)


def _new_manager(module: SimpleNamespace) -> Any:
    return module.BaseCheckpointManager(model=None, optimizer=None)


def _save(manager: Any, root: Path, step: int, keep: int) -> None:
    manager.save_checkpoint(str(root / f"global_step_{step}" / "actor"), global_step=step, max_ckpt_to_keep=keep)


@pytest.mark.usefixtures("process_group")
def test_verls_manager_with_keep_1_and_horizon_8(tmp_path: Path) -> None:
    module = _manager_module()
    protect.install(module, horizon=8)
    protect.install(module, horizon=100)  # a second install keeps the first
    manager = _new_manager(module)
    on_disk_after: dict[int, list[int]] = {}
    for step in range(5, 65, 5):
        _save(manager, tmp_path, step, keep=1)
        on_disk_after[step] = saved_steps(tmp_path)
        if step == 20:
            pin_step(tmp_path, 15)  # a trip's rollback target, pinned by the trainer
    assert on_disk_after[10] == [5, 10]
    assert on_disk_after[20] == [10, 15, 20]  # 5 pruned: 10 is the newest <= 12
    assert on_disk_after[60] == [15, 50, 55, 60]  # pinned 15; 50 is the newest <= 52
    # held-back paths stay tracked, so the pruned ones are really gone and the rest is pruned later
    tracked = [int(Path(p).parent.name.rsplit("_", 1)[1]) for p in manager.previous_saved_paths]
    assert tracked == [15, 50, 55, 60]
    assert all(Path(p).is_dir() for p in manager.previous_saved_paths)


@pytest.mark.usefixtures("process_group")
def test_verls_manager_pruning_before_a_save_with_keep_3(tmp_path: Path) -> None:
    module = _manager_module()
    protect.install(module, horizon=5)
    manager = _new_manager(module)
    for step in range(1, 21):
        _save(manager, tmp_path, step, keep=3)
    # verl alone keeps 18, 19, 20; 15 (the newest <= 20 - 5) survives for a trip with the earliest onset
    assert saved_steps(tmp_path) == [15, 16, 17, 18, 19, 20]


@pytest.mark.usefixtures("process_group")
def test_unpatched_verl_prunes_the_rollback_target(tmp_path: Path) -> None:
    # the reason for the patch: keep=1 leaves only the newest step
    manager = _new_manager(_manager_module())
    for step in range(5, 25, 5):
        _save(manager, tmp_path, step, keep=1)
    assert saved_steps(tmp_path) == [20]


def test_protection_only_when_guardrails_act() -> None:
    observe = parse_config({"mode": "observe"})
    assert (acts(observe), protection_horizon(observe)) == (False, 0)
    act = parse_config({"mode": "act"})
    assert (acts(act), protection_horizon(act)) == (True, 18)  # policy_collapse's 5 of 8 and slope window 10
    only_nan = parse_config({"mode": "act", "detectors": {name: {"enabled": False} for name in (
        "klRunaway", "gradSpike", "policyCollapse", "degenerateBatch")}})
    assert protection_horizon(only_nan) == 1
    module = _manager_module()
    original = module.BaseCheckpointManager.register_checkpoint
    protect.install_from_env(module, {"GRPO_GUARDRAILS": '{"mode": "observe"}'})
    assert module.BaseCheckpointManager.register_checkpoint is original
