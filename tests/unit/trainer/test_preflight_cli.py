"""`grpo-train --preflight` on the verl.yaml the operator renders, against files laid out as the pod sees them.

Each failing case is one of the things that used to stop a run only after it had its GPUs; the verdict
names the GRPOJob field to change, the value found and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from grpo_trainer.cli import main
from grpo_trainer.preflight import PreflightOptions, Verdict, preflight_config_file
from omegaconf import DictConfig
from preflight_pod import QWEN2_7B_SHAPE, PodFiles, lay_out, render, write_words

GIB = 2**30


@pytest.fixture
def files(tmp_path: Path, tokenizer_model_dir: Path) -> PodFiles:
    return lay_out(tmp_path / "pod", tokenizer_model_dir)


def _run(files: PodFiles, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Verdict, dict]:
    log = files.root / "termination-log"
    code = main(["--preflight", "--config_path", str(files.config), "--termination-log", str(log), *args])
    stdout = json.loads(capsys.readouterr().out)
    assert len(log.read_bytes()) <= 4096
    return code, Verdict.from_dict(stdout), json.loads(log.read_text())


def _named(verdict: Verdict, name: str) -> Any:
    return next(c for c in verdict.checks if c.name == name)


def _failure(verdict: Verdict) -> Any:
    assert not verdict.passed, verdict
    return verdict.failures[0]


def test_rendered_job_passes_every_check(files: PodFiles, capsys: pytest.CaptureFixture[str]) -> None:
    render(files)
    code, verdict, written = _run(files, capsys, "--gpu-memory", "actor=80Gi")
    assert code == 0 and verdict.passed, verdict.failures
    names = {c.name for c in verdict.checks}
    assert {"verl.keys", "verl.validate_config", "model.config", "model.weights", "model.tokenizer",
            "model.context_length", "data.file:train.jsonl", "data.enough_prompts", "checkpoints.writable",
            "checkpoints.free_space", "memory.actor", "memory.vllm_kv_cache"} <= names
    assert written["passed"] is True and len(written["checks"]) == len(verdict.checks)
    assert list(files.checkpoints.iterdir()) == []  # the write probe removed its file


def test_unknown_spec_verl_key_names_the_spec_verl_field(files: PodFiles, capsys: pytest.CaptureFixture[str]) -> None:
    render(files, lambda s: s.update(verl={"actor_rollout_ref.rollout.temprature": 0.7}))
    code, verdict, _ = _run(files, capsys)
    failure = _failure(verdict)
    assert code == 1
    assert failure.field == "spec.verl.actor_rollout_ref.rollout.temprature"
    assert "did you mean actor_rollout_ref.rollout.temperature" in failure.message


def test_context_beyond_max_position_embeddings_names_max_response_length(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lay_out(tmp_path / "pod", tokenizer_model_dir, max_position_embeddings=1024)
    render(files)  # the example: 512 + 1024 tokens
    code, verdict, _ = _run(files, capsys)
    failure = _failure(verdict)
    assert code == 1 and failure.name == "model.context_length"
    assert failure.field == "spec.data.maxResponseLength"
    assert failure.value == "maxPromptLength 512 + maxResponseLength 1024 = 1536"
    assert "at most 1024" in failure.fix


def _prompt_lengths(tmp_path: Path, tokenizer_model_dir: Path, words: list[int]) -> PodFiles:
    return lay_out(tmp_path / "pod", tokenizer_model_dir, prompts=[write_words(n) for n in words])


def test_over_long_prompts_under_refuse_fail_naming_max_prompt_length(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _prompt_lengths(tmp_path, tokenizer_model_dir, [3] * 300 + [40, 50])
    render(files, lambda s: s["data"].update(maxPromptLength=16, oversize="refuse"))
    _, verdict, _ = _run(files, capsys)
    failure = _failure(verdict)
    assert failure.field == "spec.data.maxPromptLength"
    assert failure.value == "2 of 302 prompts over 16 tokens (longest 55)"
    assert "train.jsonl:301 (45 tokens)" in failure.message and "at least 55" in failure.fix


def test_over_long_prompts_under_drop_pass_with_their_count(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _prompt_lengths(tmp_path, tokenizer_model_dir, [3] * 300 + [40, 50])
    render(files, lambda s: s["data"].update(maxPromptLength=16))
    code, verdict, _ = _run(files, capsys)
    assert code == 0
    data = next(c for c in verdict.checks if c.name == "data.file:train.jsonl")
    assert data.ok and "2 of 302 prompts over 16 tokens" in data.message and "dropped" in data.message


def test_fewer_prompts_than_a_batch_names_train_batch_size(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _prompt_lengths(tmp_path, tokenizer_model_dir, [3] * 10)
    render(files, lambda s: s["data"].update(trainBatchSize=16))
    _, verdict, _ = _run(files, capsys)
    failure = _failure(verdict)
    assert failure.field == "spec.data.trainBatchSize" and "lower data.trainBatchSize to at most 10" in failure.fix


def test_jsonl_with_another_prompt_key_names_prompt_key(files: PodFiles, capsys: pytest.CaptureFixture[str]) -> None:
    render(files, lambda s: s["data"].update(promptKey="question"))
    failure = _failure(_run(files, capsys)[1])
    assert failure.field == "spec.data.promptKey" and failure.value == "question"


def test_parquet_prompts_verl_would_stop_on_fail_whatever_the_oversize_policy(
    files: PodFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": [{"role": "user", "content": write_words(n)}]} for n in [3] * 300 + [30]]
    pq.write_table(pa.Table.from_pylist(rows), files.prompts.with_suffix(".parquet"))
    render(files, lambda s: s["data"].update(trainFiles=["prompts/train.parquet"], maxPromptLength=16))
    failure = _failure(_run(files, capsys)[1])
    assert failure.field == "spec.data.maxPromptLength" and "data.truncation=error" in failure.message
    assert "filter_overlong_prompts" in failure.fix


def _with_reward(files: PodFiles, source: str) -> Path:
    (files.reward_dir / "reward.py").write_text(source)
    return render(files, lambda s: s.update(reward={"type": "function",
                                                    "function": {"configMapName": "r", "key": "reward.py"}}))


# The hanging function gets 1 s; the others, which answer at once, get 60 s, so that a busy machine
# cannot turn their verdict into a timeout.
@pytest.mark.parametrize(
    ("source", "timeout", "expected"),
    [
        ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    return 1.0 / len(extra_info['missing'])\n", 60, "raised on a real row: "),
        ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    return 'good'\n", 60, "returned 'good'; verl needs a number"),
        ("import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
         "    time.sleep(600)\n", 1, "did not return within 1 s"),
        ("def compute_score(solution):\n    return 0.0\n", 60, "must accept keyword arguments"),
    ],
    ids=["raises", "not-a-number", "hangs", "wrong-signature"],
)
def test_broken_reward_function_names_the_reward_function(files: PodFiles, source: str, timeout: float,
                                                          expected: str, verl_defaults: DictConfig) -> None:
    config = _with_reward(files, source)
    verdict = preflight_config_file(str(config), options=PreflightOptions(reward_timeout_s=timeout),
                                    defaults=verl_defaults)
    failure = _failure(verdict)
    assert failure.field == "spec.reward.function"
    assert expected in failure.message


def test_working_reward_function_is_called_on_real_rows(files: PodFiles, verl_defaults: DictConfig) -> None:
    config = _with_reward(files, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                 "    return float(solution_str == ground_truth)\n")
    verdict = preflight_config_file(str(config), defaults=verl_defaults)
    reward = next(c for c in verdict.checks if c.name == "reward.function")
    assert verdict.passed and reward.message == "called on 4 row(s): 1.0, 1.0, 1.0"


def test_unwritable_checkpoint_directory_names_the_checkpoint_volume(
    files: PodFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    files.checkpoints.rmdir()
    files.checkpoints.write_text("a file where the claim's directory should be")
    render(files)
    failure = _failure(_run(files, capsys)[1])
    assert failure.field == "spec.checkpoints.volume" and failure.name == "checkpoints.writable"


def test_a_new_claim_is_judged_by_its_size_not_mounted(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lay_out(tmp_path / "pod", tokenizer_model_dir, shape=QWEN2_7B_SHAPE)
    files.checkpoints.rmdir()  # not mounted: the operator's new claim binds where the actor runs
    render(files)  # keep 3: 3 kept + 1 being written of a 7.6B model's ~85 GiB checkpoints
    _, verdict, _ = _run(files, capsys, "--new-checkpoint-claim", str(100 * GIB))
    failure = _named(verdict, "checkpoints.size")
    assert not failure.ok and failure.field == "spec.checkpoints.volume"
    assert "3 kept + 1 being written" in failure.message
    assert "set spec.checkpoints.volume.size to at least 34" in failure.fix  # 4 x ~85 GiB: 34xGi
    assert _named(verdict, "checkpoints.writable").ok
    assert not files.checkpoints.exists()  # nothing was written in its place
    _, verdict, _ = _run(files, capsys, "--new-checkpoint-claim", str(400 * GIB))
    assert _named(verdict, "checkpoints.size").ok


def test_memory_that_cannot_fit_names_the_lever(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lay_out(tmp_path / "pod", tokenizer_model_dir, shape=QWEN2_7B_SHAPE)
    render(files, lambda s: s.update(algorithm={"microBatchSizePerGPU": 32}))
    _, verdict, _ = _run(files, capsys, "--gpu-memory", "actor=80Gi")
    failure = _named(verdict, "memory.actor")
    assert not failure.ok and failure.field == "spec.algorithm.microBatchSizePerGPU"
    assert "actor.update needs about" in failure.message and "now 32" in failure.fix


def test_colocated_vllm_share_that_leaves_no_room_names_gpu_memory_utilization(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lay_out(tmp_path / "pod", tokenizer_model_dir, shape=QWEN2_7B_SHAPE)
    render(files, lambda s: s.update(rollout={"gpuMemoryUtilization": 0.95}))
    failure = _named(_run(files, capsys, "--gpu-memory", "actor=80Gi")[1], "memory.actor")
    assert not failure.ok and failure.field == "spec.rollout.gpuMemoryUtilization"
    assert "rollout needs about" in failure.message
    assert "lower rollout.gpuMemoryUtilization to at most 0.84" in failure.fix


def test_unknown_gpu_memory_is_said_not_guessed(files: PodFiles, capsys: pytest.CaptureFixture[str]) -> None:
    render(files)
    code, verdict, _ = _run(files, capsys)
    fit = next(c for c in verdict.checks if c.name == "memory.fit")
    assert code == 0 and fit.ok and "not checked" in fit.message and fit.field == "spec.placement.gpuMemory"


def test_gpu_memory_takes_bytes_or_binary_suffixes_and_refuses_other_roles() -> None:
    from grpo_trainer.cli import parse_gpu_memory
    from grpo_trainer.errors import GrpoConfigError

    assert parse_gpu_memory(["actor=80Gi", "rollout=85899345920"]) == {"actor": 80 * GIB, "rollout": 80 * GIB}
    with pytest.raises(GrpoConfigError, match="ROLE actor, rollout or reward"):
        parse_gpu_memory(["critic=80Gi"])


def test_a_new_claim_without_a_size_is_sized_for_keep_and_one_more_checkpoint(
    tmp_path: Path, tokenizer_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lay_out(tmp_path / "pod", tokenizer_model_dir, shape=QWEN2_7B_SHAPE)
    files.checkpoints.rmdir()
    render(files)
    _, verdict, written = _run(files, capsys, "--new-checkpoint-claim", "auto")
    sized = _named(verdict, "checkpoints.size")
    assert sized.ok and "chosen for the new claim" in sized.message
    assert verdict.checkpoint_claim_bytes is not None and verdict.checkpoint_claim_bytes >= 4 * 85 * GIB
    assert verdict.checkpoint_claim_bytes % GIB == 0
    assert written["checkpointClaimBytes"] == verdict.checkpoint_claim_bytes
