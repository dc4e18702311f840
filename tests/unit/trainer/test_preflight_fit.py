"""The memory estimate's arithmetic: shapes from config.json, and how each lever moves each phase.

Whether the estimate is near what a GPU measures is bench/fit's business (bench/fit/RESULTS.md); here
the parts that can be exact are held exact (parameter counts against transformers' own models).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from grpo_trainer.preflight.fit import (
    ActorLayout,
    GiB,
    ModelShape,
    RolloutLayout,
    actor_log_prob,
    actor_update,
    estimate,
    reference_log_prob,
    rollout,
    vllm_budget,
)
from preflight_pod import QWEN2_05B_SHAPE, QWEN2_7B_SHAPE

QWEN2_05B = {**QWEN2_05B_SHAPE, "model_type": "qwen2"}
LLAMA_LIKE = {"vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8,
              "num_key_value_heads": 4, "intermediate_size": 688, "tie_word_embeddings": False,
              "model_type": "llama"}
REFERENCE_ACTOR = ActorLayout(gpus=4, micro_batch=4, log_prob_micro_batch=4, seq_len=1536)
COLOCATED_ACTOR = replace(REFERENCE_ACTOR, gpus=8)


def _transformers_count(config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config", [QWEN2_05B, LLAMA_LIKE, {**QWEN2_7B_SHAPE, "model_type": "qwen2"}],
                         ids=["qwen2-0.5b-tied-bias", "llama-untied", "qwen2-7b-untied"])
def test_parameter_count_matches_transformers(config: dict) -> None:
    assert ModelShape.from_hf_config(config).params == _transformers_count(config)


def test_kv_cache_per_token_splits_kv_heads_over_tensor_parallel_and_replicates_below_one() -> None:
    shape = ModelShape.from_hf_config(QWEN2_05B)  # 2 KV heads of 64
    assert shape.kv_bytes_per_token(1) == 2 * 24 * 2 * 64 * 2
    assert shape.kv_bytes_per_token(2) == 2 * 24 * 1 * 64 * 2
    assert shape.kv_bytes_per_token(4) == shape.kv_bytes_per_token(2)  # one KV head per GPU at least


def test_both_examples_fit_80g_gpus() -> None:
    shape = ModelShape.from_hf_config({**QWEN2_7B_SHAPE, "model_type": "qwen2"})
    reference = estimate(shape, REFERENCE_ACTOR, RolloutLayout(2, 0.7, 1843, 16384, colocated=False),
                         {"actor": 80 * GiB, "rollout": 80 * GiB})
    colocated = estimate(shape, COLOCATED_ACTOR, RolloutLayout(2, 0.7, 1843, 16384, colocated=True),
                         {"actor": 80 * GiB})
    assert max(p.total for p in reference) < 80 * GiB
    assert max(p.total for p in colocated) < 80 * GiB
    assert [p.phase for p in colocated] == ["actor.update", "actor.log_prob", "ref.log_prob", "rollout"]
    assert {p.pool for p in reference} == {"actor", "rollout"}


def test_sharded_states_shrink_with_gpus_and_activations_grow_with_the_micro_batch() -> None:
    shape = ModelShape.from_hf_config(QWEN2_05B)
    base = actor_update(shape, COLOCATED_ACTOR)
    more_gpus = actor_update(shape, replace(COLOCATED_ACTOR, gpus=16))
    bigger_micro = actor_update(shape, replace(COLOCATED_ACTOR, micro_batch=8))
    assert more_gpus.parts["adam_moments_shard"] * 2 == pytest.approx(base.parts["adam_moments_shard"], abs=8)
    assert bigger_micro.parts["logits"] == 2 * base.parts["logits"]
    assert base.parts["logits"] == 4 * 1536 * 151936 * 15
    no_checkpointing = actor_update(shape, replace(COLOCATED_ACTOR, gradient_checkpointing=False))
    assert no_checkpointing.total > base.total


def test_offload_frees_the_colocated_rollout_phase_but_not_the_update() -> None:
    shape = ModelShape.from_hf_config({**QWEN2_7B_SHAPE, "model_type": "qwen2"})
    layout = RolloutLayout(2, 0.7, 1843, 16384, colocated=True)
    offloaded = replace(COLOCATED_ACTOR, param_offload=True, optimizer_offload=True)
    assert rollout(shape, offloaded, layout, 80 * GiB).total < rollout(shape, COLOCATED_ACTOR, layout, 80 * GiB).total
    assert actor_update(shape, offloaded).parts["weights_fp32_shard"] > 0


def test_reference_forward_keeps_the_actor_states_and_adds_only_gathered_units() -> None:
    shape = ModelShape.from_hf_config(QWEN2_05B)
    ref = reference_log_prob(shape, COLOCATED_ACTOR)
    assert ref.parts["weights_fp32_shard"] == int(4 * shape.params / 8)
    assert ref.parts["logits"] == 4 * 1536 * 151936 * 6  # bf16 logits, their scaled copy, the packed copy
    assert "grads_fp32_shard" not in ref.parts


# verl 0.9.1 on one H100 (bench/gpu/RESULTS.md, 2026-12-06 c and d): the process's peak allocated over a step, with
# the old-policy log-prob forward at 32 x 768 tokens of Qwen2.5 shapes (random init, tied embeddings).
QWEN25 = {"vocab_size": 151936, "tie_word_embeddings": True, "num_key_value_heads": 2, "model_type": "qwen2"}
MEASURED_LOG_PROB_PEAKS = [
    ({**QWEN25, "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "intermediate_size": 4864},
     60.1),
    ({**QWEN25, "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "intermediate_size": 8960},
     71.8),
]


@pytest.mark.parametrize(("config", "measured_gib"), MEASURED_LOG_PROB_PEAKS)
def test_log_prob_forward_estimate_is_within_5_percent_of_verls_measured_peak(
    config: dict, measured_gib: float
) -> None:
    shape = ModelShape.from_hf_config(config)
    predicted = actor_log_prob(shape, ActorLayout(gpus=1, micro_batch=32, log_prob_micro_batch=32, seq_len=768))
    assert abs(predicted.total / GiB - measured_gib) <= 0.05 * measured_gib


def test_vllm_budget_is_what_is_left_after_weights_and_profiling() -> None:
    shape = ModelShape.from_hf_config({**QWEN2_7B_SHAPE, "model_type": "qwen2"})
    tight = vllm_budget(shape, RolloutLayout(1, 0.2, 4096, 16384, colocated=False), 80 * GiB)
    roomy = vllm_budget(shape, RolloutLayout(2, 0.7, 4096, 16384, colocated=False), 80 * GiB)
    assert tight.kv_cache < tight.kv_needed  # 16 GiB cannot hold 15 GiB of weights and a profile batch
    assert roomy.kv_cache > 100 * roomy.kv_needed
    assert roomy.weights == 2 * shape.params // 2
