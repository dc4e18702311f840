"""vLLM's "uni" executor for rollout servers of one GPU (grpo_trainer.startup.vllm_executor) and its config key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grpo_trainer.config import build_config
from grpo_trainer.startup.vllm_executor import UNI_ENV, choose_executor, executor_choices, uni_blocker
from omegaconf import DictConfig, OmegaConf

KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend"
REWARD_KEY = "reward.reward_model.rollout.engine_kwargs.vllm.distributed_executor_backend"


def one_gpu_rollout(**changes: Any) -> dict[str, Any]:
    """A rollout section as verl 0.9.1 composes it, for one GPU per server."""
    rollout: dict[str, Any] = {
        "name": "vllm",
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "data_parallel_size": 1,
        "expert_parallel_size": 1,
        "disaggregation": {"enabled": False},
        "checkpoint_engine": {"backend": "naive"},
        "engine_kwargs": {"vllm": {}, "sglang": {}},
    }
    return {**rollout, **changes}


def test_a_vllm_server_of_one_gpu_may_run_its_worker_in_the_engine_process() -> None:
    assert uni_blocker(one_gpu_rollout()) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"tensor_model_parallel_size": 2}, "tensor_model_parallel_size=2"),
        ({"pipeline_model_parallel_size": 2}, "pipeline_model_parallel_size=2"),
        ({"data_parallel_size": 4}, "data_parallel_size=4"),
        ({"expert_parallel_size": 2}, "expert_parallel_size=2"),
        ({"name": "sglang"}, "'sglang', not vllm"),
        ({"disaggregation": {"enabled": True}}, "disaggregation"),
        ({"checkpoint_engine": {"backend": "nccl"}}, "checkpoint_engine.backend=nccl"),
        ({"engine_kwargs": {"vllm": {"distributed_executor_backend": "ray"}}}, "distributed_executor_backend"),
        ({"engine_kwargs": {"vllm": {"tensor_parallel_size": 2}}}, "engine_kwargs.vllm.tensor_parallel_size"),
    ],
)
def test_anything_but_one_gpu_per_vllm_server_keeps_verls_executor(changes: dict[str, Any], reason: str) -> None:
    blocker = uni_blocker(one_gpu_rollout(**changes))
    assert blocker is not None and reason in blocker


def test_the_kill_switch_keeps_verls_executor_for_one_gpu_too() -> None:
    assert choose_executor("s", one_gpu_rollout(), {UNI_ENV: "0"}).backend is None
    assert choose_executor("s", one_gpu_rollout(), {UNI_ENV: "1"}).backend == "uni"
    assert choose_executor("s", one_gpu_rollout(), {}).backend == "uni"


def test_the_reward_models_servers_are_chosen_for_only_when_the_reward_model_is_enabled() -> None:
    config = {
        "actor_rollout_ref": {"rollout": one_gpu_rollout()},
        "reward": {"reward_model": {"enable": False, "rollout": one_gpu_rollout()}},
    }
    assert [c.section for c in executor_choices(config, {})] == ["actor_rollout_ref.rollout"]
    config["reward"]["reward_model"]["enable"] = True
    choices = executor_choices(config, {})
    assert [(c.section, c.backend) for c in choices] == [
        ("actor_rollout_ref.rollout", "uni"),
        ("reward.reward_model.rollout", "uni"),
    ]
    assert choices[1].key == REWARD_KEY


def _config(tmp_path: Path, model_dir: Path, extra: str = "") -> Path:
    cfg = tmp_path / "v.yaml"
    cfg.write_text(
        f"actor_rollout_ref.model.path: {model_dir}\nactor_rollout_ref.rollout.name: vllm\n"
        f"actor_rollout_ref.rollout.tensor_model_parallel_size: 1\n{extra}"
    )
    return cfg


def test_grpo_train_sets_uni_for_a_one_gpu_rollout_and_leaves_tp2_to_verl(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    cfg = _config(tmp_path, model_dir)
    one = build_config(str(cfg), defaults=verl_defaults, environ={}).verl
    assert OmegaConf.select(one, KEY) == "uni"
    two = build_config(
        str(cfg), ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"], defaults=verl_defaults, environ={}
    ).verl
    assert OmegaConf.select(two, KEY) is None
    off = build_config(str(cfg), defaults=verl_defaults, environ={UNI_ENV: "0"}).verl
    assert OmegaConf.select(off, KEY) is None


def test_an_executor_the_user_chose_is_kept(tmp_path: Path, model_dir: Path, verl_defaults: DictConfig) -> None:
    cfg = _config(tmp_path, model_dir, f"+{KEY}: mp\n")
    assert OmegaConf.select(build_config(str(cfg), defaults=verl_defaults, environ={}).verl, KEY) == "mp"


def test_an_enabled_reward_models_one_gpu_server_gets_uni_too(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    cfg = _config(
        tmp_path,
        model_dir,
        f"reward.reward_model.enable: true\nreward.reward_model.model_path: {model_dir}\n"
        "reward.reward_model.rollout.name: vllm\nreward.reward_model.rollout.tensor_model_parallel_size: 1\n"
        "grpo.reward.type: model\n",
    )
    built = build_config(str(cfg), defaults=verl_defaults, environ={}).verl
    assert OmegaConf.select(built, REWARD_KEY) == "uni"
    # verl's own key beside it is untouched: its engine_kwargs had no vllm mapping before
    assert OmegaConf.select(built, "reward.reward_model.rollout.engine_kwargs.vllm") == {
        "distributed_executor_backend": "uni"
    }
