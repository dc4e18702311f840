"""The pydantic API: defaults are the reference setup's, JSON is camelCase, bodies parse."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJob, GRPOJobSpec
from pydantic import ValidationError

MINIMAL = {
    "model": {"claimName": "models", "path": "Qwen2-7B-Instruct"},
    "data": {"claimName": "datasets", "trainFiles": ["train.jsonl"]},
    "training": {"totalSteps": 10},
}


def test_defaults_are_the_reference_setup() -> None:
    spec = GRPOJobSpec.model_validate(MINIMAL)
    assert spec.algorithm.group_size == 8
    assert spec.algorithm.adv_estimator == "grpo"
    assert (spec.algorithm.kl_loss.enabled, spec.algorithm.kl_loss.coef, spec.algorithm.kl_loss.type) == (
        True,
        0.001,
        "low_var_kl",
    )
    r = spec.rollout
    assert (r.engine, r.tensor_parallel_size) == ("vllm", 2)
    assert (r.temperature, r.top_p, r.chunked_prefill) == (0.7, 0.9, True)
    # empty: sized by the preflight for the model and GPUs (render/verl_config.py has the fallbacks)
    assert (r.gpu_memory_utilization, r.max_num_batched_tokens, spec.algorithm.micro_batch_size_per_gpu) == (
        None, None, None)
    assert r.max_model_len_factor == 1.2
    assert spec.data.max_prompt_length == 512
    assert spec.data.prompt_key == "prompt"
    assert spec.placement.gpus_per_node == 8
    assert spec.placement.mode == "colocated"
    assert spec.reward.type == "length"
    assert spec.checkpoints.delete_policy == "Retain"
    assert spec.checkpoints.resume == "auto"


def test_json_names_are_camel_case_and_python_names_snake_case() -> None:
    spec = GRPOJobSpec.model_validate(MINIMAL)
    dumped = spec.model_dump(by_alias=True)
    assert "tensorParallelSize" in dumped["rollout"]
    assert "microBatchSizePerGPU" in dumped["algorithm"]
    assert "gpusPerNode" in dumped["placement"]
    # populate_by_name: Python code may build specs with attribute names too.
    built = GRPOJobSpec(
        model={"claim_name": "m", "path": "p"},  # type: ignore[arg-type]
        data={"claim_name": "d", "train_files": ["t.jsonl"]},  # type: ignore[arg-type]
        training={"total_steps": 1},  # type: ignore[arg-type]
    )
    assert built.model.claim_name == "m"


def test_whole_body_parses_with_status(reference_body: dict[str, Any]) -> None:
    body = {
        **reference_body,
        "status": {
            "phase": "Running",
            "progress": {"step": 3, "rewardMean": 1.5},
            "conditions": [{"type": "Ready", "status": "True", "reason": "RayJobRunning"}],
            "someFutureField": 1,  # an older operator must read a newer status
        },
    }
    job = GRPOJob.model_validate(body)
    assert job.status is not None and job.status.progress is not None
    assert job.status.progress.reward_mean == 1.5
    assert job.metadata["name"] == "qwen2-7b-reference"


def test_unknown_spec_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="tensorParalelSize"):
        GRPOJobSpec.model_validate({**MINIMAL, "rollout": {"tensorParalelSize": 2}})


def test_spec_is_frozen() -> None:
    spec = GRPOJobSpec.model_validate(MINIMAL)
    with pytest.raises(ValidationError):
        spec.image = "other"  # type: ignore[misc]


def test_quantities_accept_int_or_string() -> None:
    spec = GRPOJobSpec.model_validate(
        {**MINIMAL, "placement": {"roles": {"actor": {"gpus": 8, "resources": {"cpu": 32, "memory": "512Gi"}}}}}
    )
    actor = spec.placement.roles.actor
    assert actor is not None and (actor.resources.cpu, actor.resources.memory) == (32, "512Gi")
    with pytest.raises(ValidationError):
        GRPOJobSpec.model_validate(
            {**MINIMAL, "placement": {"roles": {"actor": {"gpus": 8, "resources": {"cpu": "lots"}}}}}
        )
