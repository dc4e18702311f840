"""The requested learning rate is in effect after the checkpoint load, and stays so through the schedule."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from grpo_trainer.rollback.learning_rate import install, install_from_env, set_base_lr
from torch.optim.lr_scheduler import LambdaLR

WARMUP = 10


def _build(lr: float) -> tuple[torch.nn.Module, torch.optim.AdamW, LambdaLR]:
    """An actor as verl builds it: AdamW with two param groups and a linear warm-up (LambdaLR)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    groups = [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": lr / 10}]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    scheduler = LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
    return model, optimizer, scheduler


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: LambdaLR, steps: int) -> None:
    for _ in range(steps):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()


def _resumed(saved_lr: float, config_lr: float, steps: int = 4) -> tuple[torch.optim.AdamW, LambdaLR]:
    """Train at saved_lr, save, then build fresh ones from a config at config_lr and load: verl's resume."""
    model, optimizer, scheduler = _build(saved_lr)
    _train(model, optimizer, scheduler, steps)
    saved = (optimizer.state_dict(), scheduler.state_dict())
    _, optimizer, scheduler = _build(config_lr)
    optimizer.load_state_dict(saved[0])
    scheduler.load_state_dict(saved[1])
    return optimizer, scheduler


def test_the_load_undoes_a_changed_config_lr() -> None:
    # the reason the patch exists: the config's new lr is gone once the checkpoint is loaded
    optimizer, scheduler = _resumed(saved_lr=1e-6, config_lr=5e-7)
    assert scheduler.base_lrs[0] == pytest.approx(1e-6)
    assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(1e-6)


def test_base_lr_is_set_and_survives_the_next_scheduler_steps() -> None:
    optimizer, scheduler = _resumed(saved_lr=1e-6, config_lr=5e-7, steps=4)
    change = set_base_lr(optimizer, scheduler, 5e-7)
    assert (change.before, change.after) == (pytest.approx(1e-6), 5e-7)
    assert scheduler.base_lrs == pytest.approx([5e-7, 5e-8])
    assert [g["initial_lr"] for g in optimizer.param_groups] == pytest.approx([5e-7, 5e-8])
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-7 * 5 / WARMUP)  # warm-up step 4 of 10
    assert scheduler.get_last_lr()[0] == pytest.approx(5e-7 * 5 / WARMUP)
    for step in range(5, 12):  # the trap: a scheduler.step() recomputes lr from base_lrs
        scheduler.step()
        expected = 5e-7 * min(1.0, (step + 1) / WARMUP)
        assert scheduler.get_last_lr() == pytest.approx([expected, expected / 10])
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected)


def test_setting_it_again_is_a_no_op() -> None:
    optimizer, scheduler = _resumed(saved_lr=5e-7, config_lr=5e-7)
    before = [dict(g, params=None) for g in optimizer.param_groups]
    assert not set_base_lr(optimizer, scheduler, 5e-7).changed
    assert [dict(g, params=None) for g in optimizer.param_groups] == before


def test_without_a_scheduler_the_lr_is_the_base() -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    set_base_lr(optimizer, None, 2.5e-7)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-7)


class _Manager:
    """Stands in for verl's FSDPCheckpointManager: its load restores what the checkpoint saved."""

    def __init__(self, saved: tuple[dict[str, Any], dict[str, Any]], config_lr: float) -> None:
        self.saved = saved
        _, self.optimizer, self.lr_scheduler = _build(config_lr)
        self.rank = 0

    def load_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        self.optimizer.load_state_dict(self.saved[0])
        self.lr_scheduler.load_state_dict(self.saved[1])


def test_the_patched_load_logs_and_sets_the_lr(caplog: pytest.LogCaptureFixture) -> None:
    model, optimizer, scheduler = _build(1e-6)
    _train(model, optimizer, scheduler, 3)
    module = SimpleNamespace(FSDPCheckpointManager=type("FSDPCheckpointManager", (_Manager,), {}))
    install_from_env(module, {"GRPO_ROLLBACK": '{"attempt": 2, "step": 3, "detector": "kl_runaway"}'})
    assert not hasattr(module.FSDPCheckpointManager.load_checkpoint, "__grpo_original__")  # no lr asked
    install(module, 5e-7)
    install(module, 1e-3)  # a second install keeps the first
    manager = module.FSDPCheckpointManager((optimizer.state_dict(), scheduler.state_dict()), 5e-7)
    caplog.set_level(logging.INFO, logger="grpo_trainer")
    manager.load_checkpoint("/ckpt/global_step_3/actor")
    assert manager.lr_scheduler.base_lrs[0] == pytest.approx(5e-7)
    assert "learning rate after checkpoint load: 5e-07 (was 1e-06)" in caplog.text
