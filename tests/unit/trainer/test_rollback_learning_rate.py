"""The requested learning rate is in effect after the checkpoint load, and stays so through the schedule."""

from __future__ import annotations

import logging
from pathlib import Path
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


FSDP_RESUME = """
import json, os, sys
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import torch, torch.distributed as dist
from omegaconf import DictConfig
from torch.distributed.fsdp import fully_shard
from transformers import Qwen2Config, Qwen2ForCausalLM
from verl.utils import torch_functional
from verl.utils.checkpoint import fsdp_checkpoint_manager
import logging
logging.getLogger("grpo_trainer").setLevel(logging.INFO)  # as setup_worker does in each Ray worker
from grpo_trainer.worker_setup import install_rollback_patches

dist.init_process_group("gloo", rank=0, world_size=1)
install_rollback_patches({"GRPO_ROLLBACK": json.dumps({"attempt": 2, "step": 3, "detector": "grad_spike",
                                                       "learningRate": 5e-7})})
config = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"])

def actor(lr):
    # as verl's FSDP engine builds it: fully_shard, AdamW, verl's cosine schedule with warm-up
    torch.manual_seed(0)
    model = fully_shard(Qwen2ForCausalLM(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch_functional.get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=5,
                                                                 num_training_steps=50)
    manager = fsdp_checkpoint_manager.FSDPCheckpointManager(model=model, optimizer=optimizer,
                                                             lr_scheduler=scheduler, processing_class=None,
                                                             checkpoint_config=DictConfig({}))
    return model, optimizer, scheduler, manager

model, optimizer, scheduler, manager = actor(1e-6)
for _ in range(3):
    model(torch.ones(1, 4, dtype=torch.long)).logits.sum().backward()
    optimizer.step(); optimizer.zero_grad(); scheduler.step()
path = os.path.join(sys.argv[1], "global_step_3", "actor")
manager.save_checkpoint(path, global_step=3)
model, optimizer, scheduler, manager = actor(5e-7)
manager.load_checkpoint(path)
loaded = scheduler.base_lrs[0]
scheduler.step()
print(json.dumps({"base_lr": loaded, "lr_after_step": scheduler.get_last_lr()[0], "step": scheduler.last_epoch}))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_through_verls_fsdp_checkpoint_manager_on_cpu(tmp_path: Path) -> None:
    """verl's own save and load (FSDP2, gloo, one rank): after the load the base lr is the requested one and
    the next scheduler step follows verl's cosine-with-warm-up schedule scaled to it."""
    import json
    import subprocess
    import sys

    port = str(_free_port())
    out = subprocess.run(
        [sys.executable, "-c", FSDP_RESUME, str(tmp_path), port], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["base_lr"] == pytest.approx(5e-7)
    assert result["step"] == 4
    assert result["lr_after_step"] == pytest.approx(5e-7 * 4 / 5)  # warm-up step 4 of 5, at the new base
    assert "learning rate after checkpoint load: 5e-07 (was 1e-06)" in out.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
