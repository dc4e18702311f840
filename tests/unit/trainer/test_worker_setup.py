"""The Ray worker hook patches verl only in the workers that load the verl modules it patches."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_trainer.import_hooks import waiting, when_imported


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))


def write_module(where: Path, name: str, body: str = "VALUE = 1\n") -> None:
    (where / f"{name}.py").write_text(body)


def test_callback_runs_after_the_first_import_with_the_module(module_dir: Path) -> None:
    write_module(module_dir, "grpo_hook_late")
    seen: list[int] = []
    when_imported("grpo_hook_late", lambda m: seen.append(m.VALUE))
    assert seen == [] and waiting("grpo_hook_late")
    import grpo_hook_late  # noqa: F401

    assert seen == [1] and not waiting("grpo_hook_late")


def test_callback_runs_at_once_for_a_module_already_imported(module_dir: Path) -> None:
    write_module(module_dir, "grpo_hook_early")
    import grpo_hook_early  # noqa: F401

    seen: list[str] = []
    when_imported("grpo_hook_early", lambda m: seen.append(m.__name__))
    assert seen == ["grpo_hook_early"]


def test_module_keeps_its_own_loader(module_dir: Path) -> None:
    write_module(module_dir, "grpo_hook_loader")
    when_imported("grpo_hook_loader", lambda m: None)
    import grpo_hook_loader

    assert type(grpo_hook_loader.__loader__).__name__ == "SourceFileLoader"
    assert grpo_hook_loader.__spec__.loader is grpo_hook_loader.__loader__


def test_a_failing_patch_fails_the_import(module_dir: Path) -> None:
    write_module(module_dir, "grpo_hook_broken")

    def refuse(_: object) -> None:
        raise RuntimeError("role resource grpo.dev/actor unknown")

    when_imported("grpo_hook_broken", refuse)
    with pytest.raises(RuntimeError, match=r"grpo\.dev/actor"):
        import grpo_hook_broken  # noqa: F401
    assert "grpo_hook_broken" not in sys.modules


@pytest.mark.slow
def test_setup_hook_imports_no_verl_and_patches_verl_when_loaded() -> None:
    # A fresh interpreter, as a Ray worker is: the hook alone must not load verl or torch.
    code = textwrap.dedent(
        """
        import os, sys, json
        os.environ["GRPO_ROLE_RESOURCES"] = json.dumps({"actor": "grpo.dev/actor"})
        from grpo_trainer.worker_setup import setup_worker
        setup_worker()
        print("after hook", "verl" in sys.modules, "torch" in sys.modules)
        from verl.single_controller.ray import base
        print("pools pinned", hasattr(base.RayResourcePool.get_placement_groups, "__grpo_original__"))
        from verl.utils.tracking import Tracking
        print("grpo backend", "grpo" in Tracking.supported_backend)
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
        print("reward loop patched", hasattr(RewardLoopWorker.compute_score_disrm, "__grpo_original__"))
        from verl.utils import torch_functional
        print("log-probs chunked", torch_functional.logprobs_from_logits_v2.__module__)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-5:] == [
        "after hook False False",
        "pools pinned True",
        "grpo backend True",
        "reward loop patched True",
        "log-probs chunked grpo_trainer.token_logprobs",
    ]


def test_model_scores_reach_the_agent_loop_with_a_reward_extra_info() -> None:
    # verl 0.9.1's agent loop reads result["reward_extra_info"]; its reward-model scorer returns none
    import asyncio
    import types

    from grpo_trainer.reward import model

    class Worker:
        async def compute_score_disrm(self, data: object) -> dict:
            return {"reward_score": 0.25}

        async def compute_score(self, data: object) -> dict:
            return await self.compute_score_disrm(data)

    module = types.SimpleNamespace(RewardLoopWorker=Worker)
    model.install(module)  # type: ignore[arg-type]
    model.install(module)  # type: ignore[arg-type]  # twice (task runner and worker): wrapped once
    assert asyncio.run(Worker().compute_score(None)) == {"reward_score": 0.25, "reward_extra_info": {}}
    assert not hasattr(Worker.compute_score_disrm.__grpo_original__, "__grpo_original__")


@pytest.mark.slow
def test_rollback_patches_wait_for_verls_checkpoint_modules() -> None:
    from grpo_trainer import worker_setup
    from grpo_trainer.rollback import learning_rate, protect

    # worker_setup repeats these names to stay import-light: they must be the modules the patches patch
    assert (worker_setup.CHECKPOINT_MODULE, worker_setup.FSDP_CHECKPOINT_MODULE) == (
        protect.CHECKPOINT_MODULE,
        learning_rate.FSDP_CHECKPOINT_MODULE,
    )
    code = textwrap.dedent(
        """
        import os, sys
        os.environ["GRPO_GUARDRAILS"] = '{"mode": "act"}'
        os.environ["GRPO_ROLLBACK"] = '{"attempt": 2, "step": 10, "detector": "grad_spike", "learningRate": 5e-7}'
        from grpo_trainer.worker_setup import setup_worker
        setup_worker()
        print("after hook", "verl" in sys.modules, "torch" in sys.modules)
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
        from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager
        print("lr patched", hasattr(FSDPCheckpointManager.load_checkpoint, "__grpo_original__"))
        print("pruning patched", hasattr(BaseCheckpointManager.register_checkpoint, "__grpo_original__"))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-3:] == ["after hook False False", "lr patched True", "pruning patched True"]
