"""verl.yaml: the GRPO keys spelt as verl 0.9.1 spells them, overrides last, the grpo mapping."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_verl_config, verl_config
from grpo_operator.render.verl_config import (
    FALLBACK_BATCHED_TOKENS,
    FALLBACK_MICRO_BATCH,
    FALLBACK_UTILIZATION,
    SizedKnobs,
    fallback_micro_batch,
    sized_keys,
)
from grpojob_fixtures import plan_of, spec_with


def test_reference_keys_carry_the_reference_values(reference: tuple[GRPOJobSpec, Plan]) -> None:
    cfg = verl_config(*reference)
    expected = {
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.temperature": 0.7,
        "actor_rollout_ref.rollout.top_p": 0.9,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
        "actor_rollout_ref.rollout.gpu_memory_utilization": 0.7,
        "actor_rollout_ref.rollout.enable_chunked_prefill": True,
        "actor_rollout_ref.rollout.max_num_batched_tokens": 16384,
        "actor_rollout_ref.model.path": "/models/Qwen2-7B-Instruct",
        "data.max_prompt_length": 512,
        "data.max_response_length": 1024,
        "data.train_batch_size": 256,
        "data.prompt_key": "prompt",
        "trainer.total_training_steps": 500,
        "trainer.save_freq": 50,
        "trainer.max_actor_ckpt_to_keep": 3,
        "trainer.default_local_dir": "/checkpoints",
        "trainer.resume_mode": "auto",
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        # verl's pools follow the worker groups: actor 4 GPUs x 1 pod, rollout 2 x 1, reward 2 x 1.
        "trainer.n_gpus_per_node": 4,
        "trainer.nnodes": 1,
        "actor_rollout_ref.rollout.n_gpus_per_node": 2,
        "actor_rollout_ref.rollout.nnodes": 1,
        # verl 0.9.1's standalone rollout pool is its v1 separate-async trainer.
        "trainer.v1.trainer_mode": "separate_async",
        "trainer.v1.separate_async.parameter_sync_step": 1,
        "actor_rollout_ref.hybrid_engine": False,
        "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
        "reward.reward_model.enable": True,
        "reward.reward_model.enable_resource_pool": True,
        "reward.reward_model.n_gpus_per_node": 2,
        "reward.reward_model.nnodes": 1,
        "reward.reward_model.model_path": "/models/reward-model-7b",
    }
    assert {k: cfg.get(k) for k in expected} == expected
    assert "trainer.total_epochs" not in cfg


def test_grpo_mapping_follows_the_contract(reference: tuple[GRPOJobSpec, Plan]) -> None:
    grpo = verl_config(*reference)["grpo"]
    assert grpo == {
        "job": {"namespace": "team-a", "name": "qwen2-7b-reference"},
        "maxModelLenFactor": 1.2,
        "reward": {"type": "model"},
        "placement": {
            "mode": "disaggregated",
            "roleResources": {"actor": "grpo.dev/actor", "rollout": "grpo.dev/rollout", "reward": "grpo.dev/reward"},
        },
        "data": {
            "trainFiles": ["/data/prompts/train.jsonl"],
            "valFiles": [],
            "preparedDir": "/checkpoints/data",
            "oversize": "drop",
        },
        "metrics": {"port": 9400},
        "specVerlKeys": [],
        # every knob the preflight may size but rollout.gpuMemoryUtilization, which the example sets
        "sizedKeys": [
            "actor_rollout_ref.rollout.max_num_seqs",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.actor.use_dynamic_bsz",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            "actor_rollout_ref.rollout.max_num_batched_tokens",
        ],
    }


def test_spec_verl_keys_are_listed_for_the_preflight(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(verl={"trainer": {"logger": ["console"]}, "a.b": 1}))
    assert verl_config(spec, plan_of(spec))["grpo"]["specVerlKeys"] == ["a.b", "trainer.logger"]


def test_colocated_pins_only_the_actor_and_uses_all_gpus(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    cfg = verl_config(*colocated)
    assert cfg["grpo"]["placement"] == {"mode": "colocated", "roleResources": {"actor": "grpo.dev/actor"}}
    assert (cfg["trainer.n_gpus_per_node"], cfg["trainer.nnodes"]) == (8, 1)
    assert not any(
        k.startswith(("actor_rollout_ref.rollout.nnodes", "reward.", "trainer.v1.", "actor_rollout_ref.hybrid"))
        for k in cfg
    )


def test_function_reward_points_verl_at_the_mounted_file(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(
        colocated_body,
        lambda s: s.update(
            reward={"type": "function", "function": {"configMapName": "cm", "key": "score.py", "name": "score"}}
        ),
    )
    cfg = verl_config(spec, plan_of(spec))
    assert cfg["reward.custom_reward_function.path"] == "/etc/grpo/reward/score.py"
    assert cfg["reward.custom_reward_function.name"] == "score"
    assert cfg["grpo"]["reward"] == {"type": "function"}


def test_epochs_map_to_total_epochs(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(training={"epochs": 3}))
    cfg = verl_config(spec, plan_of(spec))
    assert cfg["trainer.total_epochs"] == 3 and "trainer.total_training_steps" not in cfg


def test_user_verl_overrides_win_and_come_last(colocated_body: dict[str, Any]) -> None:
    overrides = {"actor_rollout_ref.rollout.top_p": 0.95, "trainer": {"logger": ["console", "wandb"]}}
    spec = spec_with(colocated_body, lambda s: s.update(verl=overrides))
    cfg = verl_config(spec, plan_of(spec))
    keys = list(cfg)
    assert cfg["actor_rollout_ref.rollout.top_p"] == 0.95
    assert cfg["trainer.logger"] == ["console", "wandb"]
    assert keys[-3:] == ["actor_rollout_ref.rollout.top_p", "trainer.logger", "grpo"]


def test_rendered_text_is_yaml_with_a_header(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    text = render_verl_config(*colocated)
    assert text.startswith("# Rendered by grpo-operator for GRPOJob team-a/qwen2-7b-length.")
    assert yaml.safe_load(text) == verl_config(*colocated)


def _verl_generated_config() -> Path | None:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    return path if path.exists() else None


def _has_key(tree: dict[str, Any], dotted: str) -> bool:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.skipif(_verl_generated_config() is None, reason="verl is not installed (operator-only environment)")
def test_every_rendered_verl_key_exists_in_verl_0_9_1(
    reference: tuple[GRPOJobSpec, Plan], colocated_body: dict[str, Any]
) -> None:
    path = _verl_generated_config()
    assert path is not None
    verl_tree = yaml.safe_load(path.read_text())
    function = spec_with(
        colocated_body,
        lambda s: s.update(
            reward={"type": "function", "function": {"configMapName": "cm", "key": "r.py"}}, training={"epochs": 1}
        ),
    )
    rendered = set(verl_config(*reference)) | set(verl_config(function, plan_of(function)))
    # A '+' key adds to an open mapping of verl's (override_config): that mapping must exist.
    unknown = sorted(k for k in rendered - {"grpo"}
                     if not _has_key(verl_tree, k.removeprefix("+").rsplit(".", 1)[0] if k.startswith("+") else k))
    assert not unknown, f"not verl 0.9.1 keys: {unknown}"


def test_disaggregated_syncs_weights_once_per_step(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, lambda s: s.update(algorithm={"miniBatchSize": 64}))
    cfg = verl_config(spec, plan_of(spec))
    assert cfg["actor_rollout_ref.actor.ppo_mini_batch_size"] == 64
    assert cfg["trainer.v1.separate_async.parameter_sync_step"] == 256 // 64


# --------------------------------------------------------------------------- sizing (issue 33)


def _sized(spec: GRPOJobSpec, **values: Any) -> dict[str, Any]:
    return verl_config(spec, plan_of(spec), SizedKnobs(tuple(values.items()), "sized for a test"))


def test_knobs_left_empty_get_the_fallbacks_before_the_preflight_sized_them(colocated_body: dict[str, Any]) -> None:
    cfg = verl_config(*(lambda s: (s, plan_of(s)))(spec_with(colocated_body)))
    assert cfg["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == FALLBACK_MICRO_BATCH
    assert cfg["actor_rollout_ref.rollout.gpu_memory_utilization"] == FALLBACK_UTILIZATION
    assert cfg["actor_rollout_ref.rollout.max_num_batched_tokens"] == FALLBACK_BATCHED_TOKENS


def test_the_sized_values_replace_the_fallbacks(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body)
    cfg = _sized(spec, **{"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
                          "actor_rollout_ref.rollout.max_num_seqs": 512,
                          "actor_rollout_ref.rollout.gpu_memory_utilization": 0.07})
    assert cfg["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 64
    assert cfg["actor_rollout_ref.rollout.max_num_seqs"] == 512
    assert cfg["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.07
    assert "# Sized by the preflight: sized for a test" in render_verl_config(
        spec, plan_of(spec), SizedKnobs((), "sized for a test"))


def test_an_explicit_field_or_spec_verl_key_wins_over_a_sized_value(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(
        algorithm={"microBatchSizePerGPU": 2}, rollout={"gpuMemoryUtilization": 0.5},
        verl={"actor_rollout_ref.rollout.max_num_seqs": 128}))
    assert set(sized_keys(spec)) == {"actor_rollout_ref.rollout.max_num_batched_tokens"}
    cfg = _sized(spec, **{"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
                          "actor_rollout_ref.rollout.gpu_memory_utilization": 0.07,
                          "actor_rollout_ref.rollout.max_num_seqs": 512})
    assert cfg["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 2
    assert cfg["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.5
    assert cfg["actor_rollout_ref.rollout.max_num_seqs"] == 128


def test_the_fallback_micro_batch_divides_each_gpus_share(colocated_body: dict[str, Any]) -> None:
    # 2 prompts x 3 responses over 2 GPUs: 3 sequences each, which 4 and 2 do not divide
    spec = spec_with(colocated_body, lambda s: s.update(
        data={**s["data"], "trainBatchSize": 2}, algorithm={"groupSize": 3},
        placement={"mode": "colocated", "roles": {"actor": {"gpus": 2}}}, rollout={"tensorParallelSize": 1}))
    assert fallback_micro_batch(spec, plan_of(spec)) == 3


def test_the_image_without_flash_attn_gets_sdpa_and_padded_sequences(reference: tuple[GRPOJobSpec, Plan]) -> None:
    cfg = verl_config(*reference)
    assert cfg["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert cfg["actor_rollout_ref.model.use_remove_padding"] is False


def test_a_user_attention_override_replaces_ours_however_it_is_spelt(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(verl={
        "actor_rollout_ref.model.override_config.attn_implementation": "flash_attention_2"}))
    cfg = verl_config(spec, plan_of(spec))
    assert "+actor_rollout_ref.model.override_config.attn_implementation" not in cfg
    assert cfg["actor_rollout_ref.model.override_config.attn_implementation"] == "flash_attention_2"
