"""verl.yaml: the operator -> trainer contract (docs/config-contract.md).

Flat dotted verl 0.9.1 keys, exactly as verl spells them (checked against verl 0.9.1's
``verl/trainer/config/_generated_ppo_trainer.yaml``), then the user's raw ``spec.verl`` overrides,
then our ``grpo:`` mapping. The trainer merges the verl keys onto verl's composed defaults and
refuses unknown ones, so a misspelt key here fails loudly at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import METRICS_PORT, MOUNTS, Plan, verl_overrides

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
MICRO_KEYS = (f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
              f"{REF}.log_prob_micro_batch_size_per_gpu")
# With packed sequences the preflight sizes token budgets instead of micro batches (grpo_trainer/preflight/sizing.py).
TOKEN_BUDGET_KEYS = (f"{ACTOR}.use_dynamic_bsz", f"{ACTOR}.ppo_max_token_len_per_gpu",
                     f"{ROLLOUT}.log_prob_max_token_len_per_gpu", f"{REF}.log_prob_max_token_len_per_gpu")
UTILIZATION_KEY = f"{ROLLOUT}.gpu_memory_utilization"
BATCHED_TOKENS_KEY = f"{ROLLOUT}.max_num_batched_tokens"
MAX_SEQS_KEY = f"{ROLLOUT}.max_num_seqs"
# What a job runs with where the preflight could not size a knob the user left empty (no GPU memory known, a model
# shape the estimate does not know): the values every job ran with before the sizing.
FALLBACK_MICRO_BATCH = 4
FALLBACK_UTILIZATION = 0.7
FALLBACK_BATCHED_TOKENS = 16384
# The trainer image ships no flash-attn, and verl 0.9.1 asks transformers for flash_attention_2 unless told
# otherwise (verl/workers/config/model.py), which fails at model load. sdpa without removing the padding: sdpa
# attends across a whole pack of sequences (a block-diagonal mask over all of it), so packing would cost more
# attention than the padding it saves. An image with flash-attn sets both in spec.verl.
ATTENTION_KEYS: dict[str, Any] = {
    "actor_rollout_ref.model.use_remove_padding": False,
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
}


@dataclass(frozen=True)
class SizedKnobs:
    """What the preflight sized for the job's model and GPUs (its verdict's `sizing`): verl keys and why."""

    values: tuple[tuple[str, Any], ...]
    summary: str

    @classmethod
    def from_verdict(cls, sizing: Mapping[str, Any] | None) -> SizedKnobs | None:
        values = (sizing or {}).get("values")
        if not isinstance(values, Mapping) or not values:
            return None
        return cls(tuple((str(k), v) for k, v in values.items()), str((sizing or {}).get("summary", "")))

# libyaml's emitter: the same text as the pure-Python SafeDumper, 5x faster (a job's ConfigMap is
# rendered in the creation path). PyYAML wheels ship it; a source build may not.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _training_keys(spec: GRPOJobSpec) -> dict[str, Any]:
    if spec.training.total_steps is not None:
        return {"trainer.total_training_steps": spec.training.total_steps}
    return {"trainer.total_epochs": spec.training.epochs}


def _reward_keys(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    reward = spec.reward
    if reward.type == "function" and reward.function is not None:
        return {
            "reward.custom_reward_function.path": plan.reward_function_path,
            "reward.custom_reward_function.name": reward.function.name,
        }
    if reward.type == "model":
        keys: dict[str, Any] = {
            "reward.reward_model.enable": True,
            "reward.reward_model.model_path": plan.reward_model_path,
            # verl leaves the reward model's engine unset (???); it serves with the policy's engine.
            "reward.reward_model.rollout.name": spec.rollout.engine,
        }
        pool = plan.group("reward")
        if pool is not None:
            # Its own GPUs: verl builds a separate "reward_pool" of n_gpus_per_node x nnodes.
            keys |= {
                "reward.reward_model.enable_resource_pool": True,
                "reward.reward_model.n_gpus_per_node": pool.verl_n_gpus_per_node,
                "reward.reward_model.nnodes": pool.verl_nnodes,
            }
        return keys
    return {}  # length: the trainer fills in its own reward-manager keys


def _placement_keys(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    actor = plan.actor
    keys: dict[str, Any] = {
        "trainer.n_gpus_per_node": actor.verl_n_gpus_per_node,
        "trainer.nnodes": actor.verl_nnodes,
    }
    rollout = plan.group("rollout")
    if rollout is not None:
        mini = _mini_batch_size(spec)
        # verl 0.9.1 runs a standalone rollout pool only in its v1 "separate_async" trainer: vLLM
        # keeps generating on its own GPUs while the actor trains, and receives new weights over
        # NCCL (the default "naive" checkpoint engine assumes shared GPUs) every
        # parameter_sync_step mini-batch updates, i.e. once per training step here.
        keys |= {
            "trainer.v1.trainer_mode": "separate_async",
            "trainer.v1.separate_async.parameter_sync_step": spec.data.train_batch_size // mini,
            "actor_rollout_ref.hybrid_engine": False,
            "actor_rollout_ref.rollout.n_gpus_per_node": rollout.verl_n_gpus_per_node,
            "actor_rollout_ref.rollout.nnodes": rollout.verl_nnodes,
            "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
        }
    return keys


def _mini_batch_size(spec: GRPOJobSpec) -> int:
    return spec.algorithm.mini_batch_size or spec.data.train_batch_size


def fallback_micro_batch(spec: GRPOJobSpec, plan: Plan) -> int:
    """FALLBACK_MICRO_BATCH, or the largest divisor below it of the sequences an actor GPU gets per update:
    verl refuses micro batches that do not split that share evenly."""
    per_gpu = max(_mini_batch_size(spec) * spec.algorithm.group_size // max(plan.actor.total_gpus, 1), 1)
    return max(d for d in range(1, FALLBACK_MICRO_BATCH + 1) if per_gpu % d == 0)


def sized_keys(spec: GRPOJobSpec) -> list[str]:
    """The verl keys the preflight may size: every one whose GRPOJob field is empty and that spec.verl leaves
    alone (an explicit value always wins)."""
    keys = [MAX_SEQS_KEY]
    if spec.algorithm.micro_batch_size_per_gpu is None:
        keys += [*MICRO_KEYS, *TOKEN_BUDGET_KEYS]
    if spec.rollout.gpu_memory_utilization is None:
        keys.append(UTILIZATION_KEY)
    if spec.rollout.max_num_batched_tokens is None:
        keys.append(BATCHED_TOKENS_KEY)
    written = {k.lstrip("+") for k in verl_overrides(spec)}
    return [k for k in keys if k not in written]


def _resume_mapping(plan: Plan) -> dict[str, Any]:
    """A warm start: the trainer starts from it when the job's own directory has no checkpoint yet."""
    source = plan.resume_from
    if source is None:
        return {}
    resume: dict[str, Any] = {"dir": MOUNTS.resume_from}
    if source.step is not None:
        resume["step"] = source.step
    return {"checkpoints": {"resumeFrom": resume}}


def _grpo_mapping(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    data = MOUNTS.data
    return {
        "job": {"namespace": plan.names.namespace, "name": plan.names.job},
        "maxModelLenFactor": spec.rollout.max_model_len_factor,
        "reward": {"type": spec.reward.type},
        "placement": {
            "mode": plan.mode,
            "roleResources": {g.role: g.ray_resource for g in plan.groups},
        },
        "data": {
            "trainFiles": [f"{data}/{f}" for f in spec.data.train_files],
            "valFiles": [f"{data}/{f}" for f in spec.data.val_files],
            "preparedDir": f"{MOUNTS.checkpoints}/data",
            "oversize": spec.data.oversize,
        },
        "metrics": {"port": METRICS_PORT},
        **_resume_mapping(plan),
        # The keys the user wrote in spec.verl: the preflight names a problem with one as spec.verl.<key>.
        "specVerlKeys": sorted(verl_overrides(spec)),
        "sizedKeys": sized_keys(spec),
    }


def verl_config(spec: GRPOJobSpec, plan: Plan, sized: SizedKnobs | None = None) -> dict[str, Any]:
    """The verl.yaml content as a mapping: our verl keys (with what the preflight sized, once it has), the user's
    overrides last, then ``grpo``."""
    algo = spec.algorithm
    rollout = spec.rollout
    data = spec.data
    micro = algo.micro_batch_size_per_gpu or fallback_micro_batch(spec, plan)
    ours: dict[str, Any] = {
        "algorithm.adv_estimator": algo.adv_estimator,
        # GRPO regularises with a KL *loss* on the actor, not a KL penalty in the reward.
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.model.path": plan.model_path,
        "actor_rollout_ref.actor.optim.lr": algo.learning_rate,
        "actor_rollout_ref.actor.ppo_mini_batch_size": _mini_batch_size(spec),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.actor.use_kl_loss": algo.kl_loss.enabled,
        "actor_rollout_ref.actor.kl_loss_coef": algo.kl_loss.coef,
        "actor_rollout_ref.actor.kl_loss_type": algo.kl_loss.type,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.name": rollout.engine,
        "actor_rollout_ref.rollout.n": algo.group_size,
        "actor_rollout_ref.rollout.temperature": rollout.temperature,
        "actor_rollout_ref.rollout.top_p": rollout.top_p,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rollout.tensor_parallel_size,
        "actor_rollout_ref.rollout.gpu_memory_utilization": rollout.gpu_memory_utilization or FALLBACK_UTILIZATION,
        "actor_rollout_ref.rollout.enable_chunked_prefill": rollout.chunked_prefill,
        "actor_rollout_ref.rollout.max_num_batched_tokens": rollout.max_num_batched_tokens or FALLBACK_BATCHED_TOKENS,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        **ATTENTION_KEYS,
        "data.prompt_key": data.prompt_key,
        "data.max_prompt_length": data.max_prompt_length,
        "data.max_response_length": data.max_response_length,
        "data.train_batch_size": data.train_batch_size,
        **_training_keys(spec),
        "trainer.project_name": f"grpo-{plan.names.namespace}",
        "trainer.experiment_name": plan.names.job,
        # verl defaults to console + wandb; wandb needs an account, so it is opt-in via spec.verl.
        "trainer.logger": ["console"],
        "trainer.save_freq": spec.checkpoints.save_every,
        "trainer.max_actor_ckpt_to_keep": spec.checkpoints.keep,
        "trainer.default_local_dir": MOUNTS.checkpoints,
        "trainer.resume_mode": spec.checkpoints.resume,
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        **_placement_keys(spec, plan),
        **_reward_keys(spec, plan),
    }
    if sized is not None:
        # Only keys the user left empty: a verdict never overrides an explicit value.
        allowed = set(sized_keys(spec))
        ours |= {k: v for k, v in sized.values if k in allowed}
    overrides = verl_overrides(spec)
    written = {k.lstrip("+") for k in overrides}
    # The user's keys come last so the file reads in precedence order.
    merged = {k: v for k, v in ours.items() if k.lstrip("+") not in written} | overrides
    return {**merged, "grpo": _grpo_mapping(spec, plan)}


def render_verl_config(spec: GRPOJobSpec, plan: Plan, sized: SizedKnobs | None = None) -> str:
    """verl.yaml as text, with a header saying where it came from (and what the preflight sized, and why)."""
    header = (
        f"# Rendered by grpo-operator for GRPOJob {plan.names.namespace}/{plan.names.job}.\n"
        "# Flat dotted keys are verl 0.9.1's; `grpo` holds the operator's extension settings.\n"
    )
    if sized is not None:
        header += f"# Sized by the preflight: {' '.join(sized.summary.split())}\n"
    return header + yaml.dump(verl_config(spec, plan, sized), Dumper=_DUMPER, sort_keys=False, width=120)
