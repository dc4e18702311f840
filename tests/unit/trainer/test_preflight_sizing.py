"""The preflight's sizing (grpo_trainer/preflight/sizing.py): verl's token budgets and memory knobs from the fit
estimate, for the model, lengths, batch and GPU memory, with a margin; nothing sized where an input is unknown."""

from __future__ import annotations

import pytest
from grpo_trainer.preflight.fit import ActorLayout, ModelShape, RolloutLayout, actor_update, reference_log_prob
from grpo_trainer.preflight.sizing import (
    BATCHED_TOKENS,
    DYNAMIC_BSZ,
    LOG_PROB_MICROS,
    MAX_NUM_SEQS,
    MAX_SEQS,
    SAFETY_MARGIN,
    UPDATE_MICRO,
    UPDATE_TOKENS,
    UTILIZATION,
    Workload,
    divisors,
    largest_fitting,
    size,
    token_candidates,
    usable_memory,
)

GIB = 2**30
H200 = 143771 * 2**20
A100_40 = 40 * GIB
QWEN25_05B = ModelShape.from_hf_config({"vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
                                        "num_attention_heads": 14, "num_key_value_heads": 2,
                                        "intermediate_size": 4864, "tie_word_embeddings": True,
                                        "model_type": "qwen2"})
QWEN2_7B = ModelShape.from_hf_config({"vocab_size": 152064, "hidden_size": 3584, "num_hidden_layers": 28,
                                      "num_attention_heads": 28, "num_key_value_heads": 4,
                                      "intermediate_size": 18944, "model_type": "qwen2"})
ACTOR = ActorLayout(gpus=1, micro_batch=4, log_prob_micro_batch=4, seq_len=768)
ROLLOUT = RolloutLayout(tensor_parallel=1, gpu_memory_utilization=0.7, max_model_len=922,
                        max_num_batched_tokens=16384, colocated=True)
STEP = Workload(prompt_len=256, response_len=512, sequences_per_step=512, sequences_per_update=512, actor_gpus=1,
                engines=1, packed=False)


def test_the_margin_covers_the_largest_under_prediction_measured_on_the_h200() -> None:
    # bench/fit/RESULTS.md: the reference forward of the 3B shape measured 20.2 % above its estimate.
    assert usable_memory(H200) * 1.202 <= H200
    assert SAFETY_MARGIN == 0.2


def test_micro_batches_split_each_gpus_share_evenly_and_fit_the_usable_memory() -> None:
    values = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": H200}).values()
    micro = values[UPDATE_MICRO]
    assert STEP.update_sequences_per_gpu % micro == 0 and micro > 4
    peak = actor_update(QWEN25_05B, ActorLayout(1, micro, micro, 768)).total
    assert peak <= usable_memory(H200)
    assert all(values[k] >= micro for k in LOG_PROB_MICROS)  # a forward without gradients takes at least as many


def test_a_smaller_gpu_gets_smaller_micro_batches() -> None:
    big = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": H200}).values()
    small = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": A100_40}).values()
    assert small[UPDATE_MICRO] < big[UPDATE_MICRO]
    assert usable_memory(A100_40) >= actor_update(QWEN25_05B, ActorLayout(1, small[UPDATE_MICRO], 1, 768)).total


def test_packed_sequences_get_dynamic_token_budgets_instead_of_micro_batches() -> None:
    packed = size(QWEN25_05B, ACTOR, ROLLOUT, Workload(256, 512, 512, 512, 1, 1, packed=True), {"actor": H200})
    values = packed.values()
    assert values[DYNAMIC_BSZ] is True and UPDATE_MICRO not in values
    assert values[UPDATE_TOKENS] >= 768 and values[UPDATE_TOKENS] % 1024 == 0


def test_vllm_holds_every_sequence_of_a_step_in_one_wave_when_it_fits() -> None:
    values = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": H200}).values()
    assert values[MAX_SEQS] == 512  # verl's default (256) runs them in two waves
    assert 0 < values[UTILIZATION] < 0.7  # not more of the GPU than the KV cache of a step needs
    assert values[BATCHED_TOKENS] >= 8192


def test_a_model_that_crowds_the_gpu_caps_vllm_beside_the_actor_and_its_concurrency_by_the_kv_cache() -> None:
    sized = size(QWEN2_7B, ACTOR, ROLLOUT, STEP, {"actor": H200})
    values = sized.values()
    resident = 12 * QWEN2_7B.params  # fp32 weights and two AdamW moments stay while vLLM generates
    assert values[UTILIZATION] * H200 + resident <= usable_memory(H200)
    assert values[MAX_SEQS] < 512
    assert UPDATE_MICRO not in values  # not even one sequence's update fits beside 7B's states on one GPU
    assert "capped by the memory beside the actor" in sized.summary()


def test_nothing_is_sized_when_the_actor_pools_gpu_memory_is_unknown() -> None:
    assert size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {}) is None


def test_a_knob_the_user_set_is_never_sized() -> None:
    sized = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": H200})
    allowed = sized.allowed([UTILIZATION, MAX_SEQS, BATCHED_TOKENS])  # the micro batch was set in the spec
    assert set(allowed.values()) == {UTILIZATION, MAX_SEQS, BATCHED_TOKENS}
    # the log-prob micro batches travel with the update's: one field sets all three
    assert not set(sized.allowed([UPDATE_MICRO]).values()) - {UPDATE_MICRO}


def test_the_reference_forward_is_sized_too() -> None:
    sized = size(QWEN25_05B, ACTOR, ROLLOUT, STEP, {"actor": A100_40}).values()
    micro = sized[LOG_PROB_MICROS[1]]
    assert reference_log_prob(QWEN25_05B, ActorLayout(1, 1, micro, 768)).total <= usable_memory(A100_40)


@pytest.mark.parametrize(("n", "expected"), [(1, [1]), (12, [1, 2, 3, 4, 6, 12]), (512, [2**i for i in range(10)])])
def test_divisors_are_the_even_splits(n: int, expected: list[int]) -> None:
    assert divisors(n) == expected


def test_largest_fitting_bisects_a_rising_peak() -> None:
    assert largest_fitting([1, 2, 3, 4, 5], lambda m: m * 10, 35) == 3
    assert largest_fitting([1, 2], lambda m: m * 10, 5) is None


def test_token_candidates_start_at_one_whole_sequence() -> None:
    assert token_candidates(768, 4096) == [768, 1024, 2048, 3072, 4096]
    assert token_candidates(2048, 1000) == [2048]


def test_concurrency_never_exceeds_the_bound() -> None:
    many = Workload(256, 512, 8192, 8192, 1, 1, packed=False)
    assert size(QWEN25_05B, ACTOR, ROLLOUT, many, {"actor": H200}).values()[MAX_SEQS] <= MAX_NUM_SEQS
