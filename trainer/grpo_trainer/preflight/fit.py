"""Per-GPU memory of a GRPO step, phase by phase, as verl 0.9.1 runs it: pure numbers from shapes.

What verl holds on one GPU (verl/workers/engine/fsdp/transformer_impl.py, engine_workers.py):

- actor: FSDP1 (strategy ``fsdp``), fp32 master weights (``model_dtype: fp32`` for training), mixed
  precision with bf16 compute and fp32 gradient reduction, AdamW (two fp32 moments). Each GPU keeps
  1/N of weights, gradients and moments; the decoder layer being computed (and the prefetched next
  one) is gathered in bf16; the root unit (embeddings, final norm, an untied lm_head) stays gathered
  from forward through backward (FSDP1 does not free the root after forward).
- activations with gradient checkpointing: every layer's input, one layer recomputed with its
  gradients at a time, and the logits of a micro batch (vocab-sized per token: the largest single
  term for small models). Tokens per micro batch are taken at their bound, micro batch x
  (max prompt + max response).
- reference: the same model forward only, its weights on the CPU (FSDP ``CPUOffload``), gathered a
  unit at a time; it runs while the actor's weights and moments stay on the GPU.
- vLLM (hybrid engine, colocated): asleep during training (level 2: weights and KV cache released),
  and while generating it takes ``gpu_memory_utilization`` of the whole GPU, which it checks is free
  when it starts, beside the actor's weights and moments (gradients are freed after each step).
  Inside that budget: weights / TP, the activations of its profiling batch, and the KV cache.

The constants below are the bytes per element of each term; bench/fit/measure.py measures the same
phases on a GPU and bench/fit/RESULTS.md compares them with these predictions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

GiB = 2**30
FP32 = 4
BF16 = 2

# Bytes per logit element (tokens x vocab) at the phase's peak, from verl's own steps on an H100 (bench/gpu/RESULTS.md,
# 2026-12-06 c and d; verl reports the process's peak, never reset, so each figure is the largest phase of a step).
# Log-prob forward with entropy (the old policy): 15. Qwen2.5-0.5B and -1.5B shapes, both at 32 x 768 tokens per
# log-prob micro batch, peaked at 60.1 and 71.8 GiB allocated: 11.7 GiB apart, which is the 12 bytes per parameter
# of fp32 weights and AdamW moments between the two shapes (11.73 GiB), so both peaks are this phase, and what is
# left over is 15 bytes per logit element in each (only the total is measured; by reading verl's forward: the bf16
# logits, their temperature-scaled copy, softmax, the logsumexp's temporaries, the softmax-logits product, the packed
# copy from narrow + cat). 8 had been predicted (for the 1.5B shape 49.6 GiB: the measured peak 45 % above it,
# where the sizing's margin covers 25 %). Training: 15 as well, an upper bound: the 0.5B update (32 x 768 tokens
# too) peaked at no more than the 60.1 GiB; not measured on its own.
# Log-prob forward without entropy (the reference): the logits, the scaled copy and the packed copy, 6; read off
# verl's forward (workers/engine/fsdp/transformer_impl.py), not measured alone.
LOGIT_BYTES_TRAIN = 15
LOGIT_BYTES_LOG_PROB_ENTROPY = 15
LOGIT_BYTES_LOG_PROB = 6
ENTROPY_LOGIT_BYTES = LOGIT_BYTES_LOG_PROB_ENTROPY - LOGIT_BYTES_LOG_PROB
# A recomputed decoder layer's activations per token, in bf16 elements of hidden (H), attention
# (heads x head_dim, kv_heads x head_dim) and MLP (I) width: norms, q/k/v with their rotary copies,
# attention output, projections, residuals, gate/up/act/product. Gradients of the same size flow back.
LAYER_ELEMS_H = 8
LAYER_ELEMS_Q = 4
LAYER_ELEMS_KV = 4
LAYER_ELEMS_I = 5
LAYER_BACKWARD_FACTOR = 2
# Layers gathered at once: the one computing and the one FSDP prefetches.
GATHERED_LAYERS = 2
# Per process (a training worker, a vLLM engine worker): CUDA context, cuBLAS workspace, NCCL buffers.
PROCESS_OVERHEAD = GiB
# vLLM's profiling batch keeps, per token, about this many bf16 elements of hidden and MLP width.
VLLM_ACT_ELEMS_H = 6
VLLM_ACT_ELEMS_I = 3


@dataclass(frozen=True)
class ModelShape:
    """What config.json says about a decoder-only transformer (Qwen2, Llama, Mistral shapes)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a HuggingFace config.json mapping; KeyError names what an unusual config lacks."""
        text = config.get("text_config") or config
        hidden = int(text["hidden_size"])
        heads = int(text["num_attention_heads"])
        return cls(
            vocab_size=int(text["vocab_size"]),
            hidden_size=hidden,
            num_layers=int(text["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(text.get("num_key_value_heads") or heads),
            head_dim=int(text.get("head_dim") or hidden // heads),
            intermediate_size=int(text["intermediate_size"]),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            # Qwen2 has q/k/v biases and says so only by its model_type.
            attention_bias=bool(text.get("attention_bias", text.get("model_type") == "qwen2")),
        )

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden_size, self.q_width, self.kv_width
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        return attention + 3 * h * self.intermediate_size + 2 * h  # MLP gate/up/down, two norms

    @property
    def root_params(self) -> int:
        """Outside the decoder layers: embeddings, final norm, an untied lm_head (FSDP's root unit)."""
        embedding = self.vocab_size * self.hidden_size
        return embedding + self.hidden_size + (0 if self.tie_word_embeddings else embedding)

    @property
    def params(self) -> int:
        return self.root_params + self.num_layers * self.layer_params

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """vLLM's KV cache per token on one GPU (bf16 keys and values of every layer)."""
        kv_heads_per_gpu = max(self.num_kv_heads // tp, 1)  # fewer KV heads than TP: replicated
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * BF16


@dataclass(frozen=True)
class ActorLayout:
    """The actor (and reference) on the actor pool's GPUs."""

    gpus: int  # FSDP world size: every actor GPU
    micro_batch: int  # sequences per forward/backward on one GPU
    log_prob_micro_batch: int  # sequences per log-prob forward (actor and reference)
    seq_len: int  # max prompt + max response tokens
    gradient_checkpointing: bool = True
    param_offload: bool = False
    optimizer_offload: bool = False
    use_reference: bool = True
    entropy_in_update: bool = False


@dataclass(frozen=True)
class RolloutLayout:
    tensor_parallel: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    colocated: bool


@dataclass(frozen=True)
class PhasePeak:
    """One phase's peak on one GPU of `pool`, with the terms that make it up (bytes)."""

    phase: str
    pool: str
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass(frozen=True)
class VllmBudget:
    """How vLLM splits its gpu_memory_utilization budget on one GPU."""

    budget: int
    weights: int
    activations: int
    kv_cache: int  # what is left for the KV cache (negative: vLLM cannot start)
    kv_needed: int  # one sequence of max_model_len tokens


def _actor_states(model: ModelShape, layout: ActorLayout) -> dict[str, int]:
    """What stays on an actor GPU between phases: 1/N of fp32 weights and AdamW moments."""
    shard = model.params / layout.gpus
    return {
        "weights_fp32_shard": 0 if layout.param_offload else int(FP32 * shard),
        "adam_moments_shard": 0 if layout.optimizer_offload else int(2 * FP32 * shard),
    }


def _gathered(model: ModelShape) -> dict[str, int]:
    """bf16 weights FSDP all-gathers for compute: the root unit and the layers in flight."""
    return {
        "root_unit_bf16": BF16 * model.root_params,
        "layers_gathered_bf16": BF16 * GATHERED_LAYERS * model.layer_params,
    }


def _layer_activations(model: ModelShape, tokens: int) -> int:
    elems = (
        LAYER_ELEMS_H * model.hidden_size
        + LAYER_ELEMS_Q * model.q_width
        + LAYER_ELEMS_KV * model.kv_width
        + LAYER_ELEMS_I * model.intermediate_size
    )
    return BF16 * tokens * elems


def actor_update(model: ModelShape, layout: ActorLayout) -> PhasePeak:
    """Forward and backward of one micro batch, then the optimizer step (moments present from step 2)."""
    tokens = layout.micro_batch * layout.seq_len
    shard = model.params / layout.gpus
    logit_bytes = LOGIT_BYTES_TRAIN + (ENTROPY_LOGIT_BYTES if layout.entropy_in_update else 0)
    parts = {
        "weights_fp32_shard": int(FP32 * shard),  # in train mode even with param offload
        "grads_fp32_shard": int(FP32 * shard),  # accumulated over the micro batches of an update
        # Offloaded moments come back only for the step, after backward has freed its activations.
        "adam_moments_shard": 0 if layout.optimizer_offload else int(2 * FP32 * shard),
        "weights_bf16_shard": int(BF16 * shard),  # mixed precision's low-precision copy of the shard
        **_gathered(model),
        "root_grad_bf16": BF16 * model.root_params,  # the root's unsharded gradient, all through backward
        "logits": tokens * model.vocab_size * logit_bytes,
    }
    layer = _layer_activations(model, tokens)
    if layout.gradient_checkpointing:
        parts["checkpointed_layer_inputs"] = BF16 * tokens * model.hidden_size * model.num_layers
        recompute = LAYER_BACKWARD_FACTOR * layer + FP32 * GATHERED_LAYERS * model.layer_params
        # Backward starts at the logits and frees them before recomputing the first layer.
        if recompute > parts["logits"]:
            parts["layer_recompute_and_grads"] = recompute - parts["logits"]
    else:
        parts["all_layer_activations"] = model.num_layers * layer
    return PhasePeak("actor.update", "actor", parts)


def actor_log_prob(model: ModelShape, layout: ActorLayout) -> PhasePeak:
    """The old-policy log-probs (and entropy) forward, no gradients."""
    tokens = layout.log_prob_micro_batch * layout.seq_len
    parts = {
        **_actor_states(model, replace(layout, param_offload=False)),  # eval mode loads offloaded weights
        **_gathered(model),
        "layer_activations": _layer_activations(model, tokens),
        "logits": tokens * model.vocab_size * LOGIT_BYTES_LOG_PROB_ENTROPY,
    }
    return PhasePeak("actor.log_prob", "actor", parts)


def reference_log_prob(model: ModelShape, layout: ActorLayout) -> PhasePeak:
    """The reference forward: its weights come from the CPU a unit at a time; the actor's stay put."""
    tokens = layout.log_prob_micro_batch * layout.seq_len
    parts = {
        **_actor_states(model, layout),
        **_gathered(model),
        "layer_shard_fp32_from_cpu": int(FP32 * GATHERED_LAYERS * model.layer_params / layout.gpus),
        "layer_activations": _layer_activations(model, tokens),
        "logits": tokens * model.vocab_size * LOGIT_BYTES_LOG_PROB,
    }
    return PhasePeak("ref.log_prob", "actor", parts)


def vllm_budget(model: ModelShape, rollout: RolloutLayout, gpu_memory: int) -> VllmBudget:
    budget = int(rollout.gpu_memory_utilization * gpu_memory)
    tp = rollout.tensor_parallel
    weights = BF16 * model.params // tp
    act_elems = VLLM_ACT_ELEMS_H * model.hidden_size + VLLM_ACT_ELEMS_I * model.intermediate_size // tp
    activations = BF16 * rollout.max_num_batched_tokens * act_elems
    per_token = model.kv_bytes_per_token(tp)
    return VllmBudget(
        budget=budget,
        weights=weights,
        activations=activations,
        kv_cache=budget - weights - activations,
        kv_needed=per_token * rollout.max_model_len,
    )


def rollout(model: ModelShape, actor: ActorLayout, layout: RolloutLayout, gpu_memory: int) -> PhasePeak:
    """vLLM generating: its whole budget, and in colocated mode the actor's weights and moments beside it."""
    parts: dict[str, int] = {"vllm_budget": int(layout.gpu_memory_utilization * gpu_memory)}
    if layout.colocated:
        parts |= _actor_states(model, actor)
        parts["training_worker_overhead"] = PROCESS_OVERHEAD
    parts["vllm_worker_overhead"] = PROCESS_OVERHEAD
    return PhasePeak("rollout", "actor" if layout.colocated else "rollout", parts)


def estimate(
    model: ModelShape, actor: ActorLayout, rollout_layout: RolloutLayout, gpu_memory: dict[str, int]
) -> list[PhasePeak]:
    """Every phase's peak per GPU. `gpu_memory` (bytes per GPU, by pool) sizes vLLM's budget."""
    actor_phases = [actor_update(model, actor), actor_log_prob(model, actor)]
    if actor.use_reference:
        actor_phases.append(reference_log_prob(model, actor))
    for peak in actor_phases:
        peak.parts["training_worker_overhead"] = PROCESS_OVERHEAD
    pool = "actor" if rollout_layout.colocated else "rollout"
    phases = list(actor_phases)
    if pool in gpu_memory:
        phases.append(rollout(model, actor, rollout_layout, gpu_memory[pool]))
    return phases
