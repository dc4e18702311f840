"""Memory fit: the estimate of fit.py for this job's model and layout, against its GPUs' memory.

The layout comes from the verl config as the trainer will run it (so spec.verl overrides such as
offload count), the model's shape from its config.json, and each pool's GPU memory from the operator
(a node label or placement.gpuMemory).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from omegaconf import OmegaConf

from grpo_trainer.preflight.fit import (
    ActorLayout,
    GiB,
    ModelShape,
    PhasePeak,
    RolloutLayout,
    estimate,
    vllm_budget,
)
from grpo_trainer.preflight.sizing import Sizing, Workload, size
from grpo_trainer.preflight.verdict import Check

MICRO_FIELD = "spec.algorithm.microBatchSizePerGPU"
UTILIZATION_FIELD = "spec.rollout.gpuMemoryUtilization"
OFFLOAD_KEYS = "actor_rollout_ref.actor.fsdp_config.param_offload / optimizer_offload"


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    return OmegaConf.select(cfg, key, default=default)


def layouts(cfg: Any) -> tuple[ActorLayout, RolloutLayout]:
    """The actor and rollout layouts of a built verl config."""
    actor = "actor_rollout_ref.actor"
    seq_len = int(_get(cfg, "data.max_prompt_length")) + int(_get(cfg, "data.max_response_length"))
    micro = int(_get(cfg, f"{actor}.ppo_micro_batch_size_per_gpu") or 1)
    log_prob_micro = max(
        int(_get(cfg, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu") or micro),
        int(_get(cfg, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu") or micro),
    )
    if _get(cfg, f"{actor}.use_dynamic_bsz", False):
        # Micro batches are packed up to a token budget instead of counted in sequences.
        seq_len = int(_get(cfg, f"{actor}.ppo_max_token_len_per_gpu") or seq_len)
        micro = log_prob_micro = 1
    actor_layout = ActorLayout(
        gpus=int(_get(cfg, "trainer.n_gpus_per_node")) * int(_get(cfg, "trainer.nnodes")),
        micro_batch=micro,
        log_prob_micro_batch=log_prob_micro,
        seq_len=seq_len,
        gradient_checkpointing=bool(_get(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing", True)),
        param_offload=bool(_get(cfg, f"{actor}.fsdp_config.param_offload", False)),
        optimizer_offload=bool(_get(cfg, f"{actor}.fsdp_config.optimizer_offload", False)),
        use_reference=bool(_get(cfg, f"{actor}.use_kl_loss") or _get(cfg, "algorithm.use_kl_in_reward")),
        entropy_in_update=bool(_get(cfg, f"{actor}.calculate_entropy") or _get(cfg, f"{actor}.entropy_coeff")),
    )
    rollout = "actor_rollout_ref.rollout"
    rollout_layout = RolloutLayout(
        tensor_parallel=int(_get(cfg, f"{rollout}.tensor_model_parallel_size", 1)),
        gpu_memory_utilization=float(_get(cfg, f"{rollout}.gpu_memory_utilization")),
        max_model_len=int(_get(cfg, f"{rollout}.max_model_len") or seq_len),
        max_num_batched_tokens=int(_get(cfg, f"{rollout}.max_num_batched_tokens") or 8192),
        colocated=bool(_get(cfg, "actor_rollout_ref.hybrid_engine", True)),
    )
    return actor_layout, rollout_layout


# Attention implementations that run packed sequences as separate ones (varlen kernels); sdpa and eager attend
# across a whole pack.
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")


def workload(cfg: Any) -> Workload:
    """What one step asks of the GPUs, from a built verl config."""
    rollout = "actor_rollout_ref.rollout"
    n = int(_get(cfg, f"{rollout}.n", 1))
    tp = int(_get(cfg, f"{rollout}.tensor_model_parallel_size", 1))
    actor_gpus = int(_get(cfg, "trainer.n_gpus_per_node")) * int(_get(cfg, "trainer.nnodes"))
    rollout_gpus = actor_gpus
    if not bool(_get(cfg, "actor_rollout_ref.hybrid_engine", True)):
        rollout_gpus = int(_get(cfg, f"{rollout}.n_gpus_per_node") or 0) * int(_get(cfg, f"{rollout}.nnodes") or 0)
    attention = _get(cfg, "actor_rollout_ref.model.override_config.attn_implementation", "flash_attention_2")
    return Workload(
        prompt_len=int(_get(cfg, "data.max_prompt_length")),
        response_len=int(_get(cfg, "data.max_response_length")),
        sequences_per_step=int(_get(cfg, "data.train_batch_size")) * n,
        sequences_per_update=int(_get(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")) * n,
        actor_gpus=actor_gpus,
        engines=max(rollout_gpus // max(tp, 1), 1),
        packed=bool(_get(cfg, "actor_rollout_ref.model.use_remove_padding", True)) and attention in VARLEN_ATTENTION,
    )


def sizing(cfg: Any, model_config: Mapping[str, Any], gpu_memory: Mapping[str, int],
           allowed: Collection[str]) -> Sizing | None:
    """The knobs the user left to the sizing (`allowed`, verl keys), sized for this model and these GPUs; None
    when nothing can be sized (GPU memory or model shape unknown, nothing allowed)."""
    if not allowed:
        return None
    try:
        model = ModelShape.from_hf_config(model_config)
    except (KeyError, TypeError, ValueError):
        return None
    actor, rollout = layouts(cfg)
    sized = size(model, actor, rollout, workload(cfg), dict(gpu_memory))
    return sized.allowed(allowed) if sized is not None else None


def with_sizing(cfg: Any, sized: Sizing) -> Any:
    """A copy of the config with the sized values: what the trainer will run, for the fit check."""
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key, value in sized.values().items():
        OmegaConf.update(copy, key, value, force_add=True)
    return copy


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def _breakdown(peak: PhasePeak) -> str:
    parts = sorted(peak.parts.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {_gib(size)}" for name, size in parts[:4] if size)


def _actor_fix(peak: PhasePeak, actor: ActorLayout, rollout: RolloutLayout, gpu_memory: int) -> tuple[str, str]:
    """(field, fix) for the phase that does not fit: the lever that moves its largest terms."""
    if peak.phase == "rollout":
        others = peak.total - peak.parts["vllm_budget"]
        room = (gpu_memory - others) / gpu_memory
        fix = (f"lower rollout.gpuMemoryUtilization to at most {max(room, 0):.2f}, or offload the actor "
               f"between phases (spec.verl {OFFLOAD_KEYS}: true), or spread it over more GPUs")
        return UTILIZATION_FIELD, fix
    activations = sum(v for k, v in peak.parts.items() if "logits" in k or "activation" in k or "layer_" in k)
    if activations * 2 >= peak.total and actor.micro_batch > 1:
        return MICRO_FIELD, (f"lower algorithm.microBatchSizePerGPU (now {actor.micro_batch}; activations and "
                             f"logits take {_gib(activations)}), or shorten data.maxResponseLength")
    return "spec.placement.roles.actor.gpus", (
        f"give the actor more GPUs (placement.roles.actor.gpus x replicas, now {actor.gpus}: weights, gradients "
        f"and moments are split over them), or offload (spec.verl {OFFLOAD_KEYS}: true)")


def pool_fits(pool: str, peaks: list[PhasePeak], gpu_memory: int, actor: ActorLayout,
              rollout: RolloutLayout) -> Check:
    mine = [p for p in peaks if p.pool == pool]
    worst = max(mine, key=lambda p: p.total)
    value = f"peak {_gib(worst.total)} per GPU in {worst.phase} of {_gib(gpu_memory)}"
    summary = "; ".join(f"{p.phase} {_gib(p.total)}" for p in mine)
    if worst.total > gpu_memory:
        field, fix = _actor_fix(worst, actor, rollout, gpu_memory)
        return Check(f"memory.{pool}", field, False,
                     f"{worst.phase} needs about {_gib(worst.total)} per GPU ({_breakdown(worst)}), more than the "
                     f"{_gib(gpu_memory)} of the {pool} pool's GPUs (estimated: {summary})", value, fix)
    return Check(f"memory.{pool}", "spec.placement", True, f"fits: {summary}", value)


def vllm_fits(model: ModelShape, rollout: RolloutLayout, gpu_memory: int) -> Check:
    budget = vllm_budget(model, rollout, gpu_memory)
    value = (
        f"gpuMemoryUtilization {rollout.gpu_memory_utilization} x {_gib(gpu_memory)} = {_gib(budget.budget)}: "
        f"weights {_gib(budget.weights)}, activations {_gib(budget.activations)}, KV cache {_gib(budget.kv_cache)}"
    )
    if budget.kv_cache < budget.kv_needed:
        return Check("memory.vllm_kv_cache", UTILIZATION_FIELD, False,
                     f"{value}: vLLM needs at least {_gib(budget.kv_needed)} of KV cache for one "
                     f"{rollout.max_model_len}-token sequence and refuses to start",
                     value, "raise rollout.gpuMemoryUtilization or rollout.tensorParallelSize (weights split over "
                     "more GPUs)")
    sequences = budget.kv_cache // max(budget.kv_needed, 1)
    return Check("memory.vllm_kv_cache", UTILIZATION_FIELD, True,
                 f"{value}: room for about {sequences} sequences of {rollout.max_model_len} tokens", value)


def memory_checks(cfg: Any, model_config: Mapping[str, Any], gpu_memory: Mapping[str, int]) -> list[Check]:
    """Does every phase fit each pool's GPUs? Unknown GPU memory is said, not guessed."""
    try:
        model = ModelShape.from_hf_config(model_config)
    except (KeyError, TypeError, ValueError) as e:
        return [Check("memory.fit", "spec.model.path", True,
                      f"config.json lacks {e} for the estimate (not a decoder-only transformer shape); not checked")]
    actor, rollout = layouts(cfg)
    pool = "actor" if rollout.colocated else "rollout"
    if "actor" not in gpu_memory:
        return [Check("memory.fit", "spec.placement.gpuMemory", True,
                      "the actor pool's GPU memory is unknown (no nvidia.com/gpu.memory node label); not checked; "
                      "set placement.gpuMemory to check it", f"model {model.params / 1e9:.2f}B parameters")]
    peaks = estimate(model, actor, rollout, dict(gpu_memory))
    checks = [pool_fits("actor", peaks, gpu_memory["actor"], actor, rollout)]
    if pool in gpu_memory:
        if pool == "rollout":
            checks.append(pool_fits("rollout", peaks, gpu_memory["rollout"], actor, rollout))
        checks.append(vllm_fits(model, rollout, gpu_memory[pool]))
    return checks

