"""Real GRPO steps on one GPU through grpo-train: vLLM rollout, FSDP update, checkpoint, export, generate.

    pytest -m gpu tests/gpu

Needs an NVIDIA GPU and the trainer image's stack (verl 0.9.1, vLLM 0.24.0, Ray); skipped otherwise.
The model (tiny random Qwen2, locally trained tokenizer) and the prompts are built by the test.
GRPO_GPU_STEPS sets the number of steps (default 10); GRPO_GPU_OUT, a folder, keeps the run's result JSON and
gzipped logs (as `run_grpo.py --out` writes them), so the smoke run's step times can be reported too.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

STEPS = int(os.environ.get("GRPO_GPU_STEPS", "10"))


def _gpu_stack_missing() -> str | None:
    for module in ("torch", "vllm", "verl", "ray"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    return None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(_gpu_stack_missing() is not None, reason=str(_gpu_stack_missing())),
]


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory):
    import run_grpo

    paths = run_grpo.Paths(tmp_path_factory.mktemp("grpo-gpu"))
    run_grpo.prepare_inputs(paths, STEPS)
    result = run_grpo.run_ours(paths, STEPS, timeout_s=900)
    result.versions = run_grpo.versions()
    run_grpo.print_result(result)
    if out := os.environ.get("GRPO_GPU_OUT"):
        run_grpo.save_result(result, paths, Path(out))
    return result


def test_grpo_train_runs_every_step_and_logs_reward_and_step_time(ours) -> None:
    assert ours.rc == 0, f"grpo-train failed; log: {ours.command}"
    assert [s["step"] for s in ours.steps] == list(range(1, STEPS + 1))
    for step in ours.steps:
        assert step["timing_s/step"] > 0
        assert step["critic/score/mean"] == pytest.approx(step["response_length/mean"], rel=0.05)


def test_grpo_train_writes_a_checkpoint_at_the_last_step(ours) -> None:
    assert ours.checkpoint is not None and Path(ours.checkpoint).name == f"global_step_{STEPS}"
    assert ours.checkpoint_bytes > 0


def test_exported_checkpoint_verifies_and_generates_text(ours) -> None:
    assert ours.export is not None and ours.export["ok"], ours.export
    assert ours.generation
