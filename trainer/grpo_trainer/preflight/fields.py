"""Which GRPOJob field a verl key comes from: the preflight names the field a user edits, not verl's key.

The inverse of the operator's render (operator/grpo_operator/render/verl_config.py). A key the user
wrote in spec.verl (the operator lists them in `grpo.specVerlKeys`) is named as spec.verl.<key>.
"""

from __future__ import annotations

import re
from collections.abc import Collection

SPEC_FIELDS: dict[str, str] = {
    "actor_rollout_ref.model.path": "spec.model.path",
    "data.max_prompt_length": "spec.data.maxPromptLength",
    "data.max_response_length": "spec.data.maxResponseLength",
    "data.train_batch_size": "spec.data.trainBatchSize",
    "data.prompt_key": "spec.data.promptKey",
    "data.train_files": "spec.data.trainFiles",
    "data.val_files": "spec.data.valFiles",
    "actor_rollout_ref.rollout.n": "spec.algorithm.groupSize",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "spec.algorithm.miniBatchSize",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "spec.algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "spec.algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "spec.algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.rollout.temperature": "spec.rollout.temperature",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "spec.rollout.gpuMemoryUtilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "spec.rollout.tensorParallelSize",
    "actor_rollout_ref.rollout.max_model_len": "spec.rollout.maxModelLenFactor",
    "reward.custom_reward_function.path": "spec.reward.function",
    "reward.custom_reward_function.name": "spec.reward.function.name",
    "reward.reward_model.model_path": "spec.reward.model.path",
    "trainer.default_local_dir": "spec.checkpoints.volume",
    "trainer.n_gpus_per_node": "spec.placement.roles.actor.gpus",
    "trainer.nnodes": "spec.placement.roles.actor.replicas",
}

# Words in verl's own error messages (validate_config, the worker configs) and the field they are about.
_MESSAGE_HINTS: tuple[tuple[str, str], ...] = (
    ("real_train_batch_size", "spec.data.trainBatchSize"),
    ("ppo_micro_batch_size", "spec.algorithm.microBatchSizePerGPU"),
    ("log_prob_micro_batch_size", "spec.algorithm.microBatchSizePerGPU"),
    ("ppo_mini_batch_size", "spec.algorithm.miniBatchSize"),
    ("train_batch_size", "spec.data.trainBatchSize"),
    ("temperature", "spec.rollout.temperature"),
    ("custom_reward_function", "spec.reward.function"),
    ("reward function", "spec.reward.function"),
    ("max_model_len", "spec.rollout.maxModelLenFactor"),
    ("tensor_model_parallel_size", "spec.rollout.tensorParallelSize"),
)
_QUOTED_KEY = re.compile(r"'(\+?[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+)'")


def spec_field(key: str, user_keys: Collection[str] = ()) -> str:
    """The GRPOJob field behind verl key `key` (spec.verl.<key> when the user set it there)."""
    bare = key.lstrip("+")
    if key in user_keys or bare in user_keys:
        return f"spec.verl.{bare}"
    return SPEC_FIELDS.get(bare, f"spec.verl.{bare}")


def field_in_message(message: str, user_keys: Collection[str] = ()) -> str:
    """Best guess at the field an error message is about: a quoted verl key, else verl's own words."""
    quoted = _QUOTED_KEY.search(message)
    if quoted:
        return spec_field(quoted.group(1), user_keys)
    lowered = message.lower()
    return next((field for word, field in _MESSAGE_HINTS if word in lowered), "spec")
