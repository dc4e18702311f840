"""Real GRPO steps on one GPU through grpo-train: vLLM rollout, FSDP update, checkpoint, export, generate.

    pytest -m gpu tests/gpu

Needs an NVIDIA GPU and the trainer image's stack (verl 0.9.1, vLLM 0.24.0, Ray); skipped otherwise.
The model (tiny random Qwen2, locally trained tokenizer) and the prompts are built by the run. The run is
the `smoke` run of the gpu batch (conftest.py): GRPO_GPU_STEPS steps (default 10), the length reward.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_runs import gpu_marks, outcome_of

pytestmark = gpu_marks()


@pytest.fixture(scope="module")
def ours(gpu_batch):
    return outcome_of(gpu_batch, "smoke").result


def test_grpo_train_runs_every_step_and_logs_reward_and_step_time(ours) -> None:
    assert ours.rc == 0, f"grpo-train failed; log: {ours.command}"
    steps = int(ours.spec["steps"])
    assert [s["step"] for s in ours.steps] == list(range(1, steps + 1))
    for step in ours.steps:
        assert step["timing_s/step"] > 0
        assert step["critic/score/mean"] == pytest.approx(step["response_length/mean"], rel=0.05)


def test_grpo_train_writes_a_checkpoint_and_every_steps_metrics(ours) -> None:
    steps = int(ours.spec["steps"])
    assert ours.checkpoint is not None and Path(ours.checkpoint).name == f"global_step_{steps}"
    assert ours.checkpoint_bytes > 0
    from grpo_trainer.progress.step_file import read_steps

    recorded = read_steps(Path(ours.steps_file))
    assert [r["step"] for r in recorded] == list(range(1, steps + 1))
    assert all("actor/entropy" in r and "timing_s/gen" in r for r in recorded)


def test_exported_checkpoint_verifies_and_generates_text(ours) -> None:
    assert ours.export is not None and ours.export["ok"], ours.export
    assert ours.generation
