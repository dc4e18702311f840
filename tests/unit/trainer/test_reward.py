"""The length reward, loaded and run through verl 0.9.1's own reward loop worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from grpo_trainer.config import build_config
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.reward.length import LengthRewardManager
from grpo_trainer.reward.user_function import validate_reward_function
from omegaconf import DictConfig


def _batch(valid_response_lengths: list[int], prompt_len: int = 4, response_len: int = 6):
    from verl import DataProto

    b = len(valid_response_lengths)
    prompt_mask = torch.ones(b, prompt_len, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding on a prompt must not count
    response_mask = torch.zeros(b, response_len, dtype=torch.long)
    for i, n in enumerate(valid_response_lengths):
        response_mask[i, :n] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": torch.randint(2, 9, (b, prompt_len)),
            "responses": torch.randint(2, 9, (b, response_len)),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        },
        non_tensors={"data_source": ["grpo"] * b},
    )


def _config(tmp_path: Path, model: Path, defaults: DictConfig, extra: str = "", reward: str = "length") -> DictConfig:
    cfg = tmp_path / "verl.yaml"
    cfg.write_text(
        f"actor_rollout_ref.model.path: {model}\nactor_rollout_ref.rollout.name: vllm\n{extra}"
        f"grpo:\n  reward: {{type: {reward}}}\n"
    )
    return build_config(str(cfg), defaults=defaults).verl


def test_verl_reward_loop_runs_our_length_manager_and_scores_valid_response_tokens(
    tmp_path: Path, tokenizer_model_dir: Path, verl_defaults: DictConfig
) -> None:
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    config = _config(tmp_path, tokenizer_model_dir, verl_defaults)
    worker = RewardLoopWorker(config)  # what verl 0.9.1's RewardLoopManager starts as a Ray actor
    assert type(worker.reward_manager) is LengthRewardManager

    data = _batch([1, 3, 6])
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    assert [o["reward_score"] for o in outputs] == [1.0, 3.0, 6.0]
    assert [o["reward_extra_info"]["response_tokens"] for o in outputs] == [1, 3, 6]

    manager_cls = resolve_reward_manager_cls(config)
    rm_scores = manager_cls.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    assert rm_scores.sum(-1).tolist() == [1.0, 3.0, 6.0]
    assert rm_scores[1, 2].item() == 3.0  # placed on the last valid response token


def test_stock_verl_config_would_not_run_the_length_reward(verl_defaults: DictConfig) -> None:
    # control: without our keys verl 0.9.1 resolves its naive (rule/dataset) manager
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    assert resolve_reward_manager_cls(verl_defaults) is not LengthRewardManager


def test_length_reward_refuses_a_custom_function_it_would_ignore(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    with pytest.raises(GrpoConfigError, match="custom_reward_function"):
        _config(tmp_path, model_dir, verl_defaults, extra="reward.custom_reward_function.path: /x.py\n")


GOOD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


@pytest.mark.parametrize(
    ("source", "name", "message"),
    [
        (
            "import math\n\ndef compute_score(data_source, solution_str\n    return 1\n",
            "compute_score",
            r"reward\.py:3: .*SyntaxError",
        ),
        (
            "import json\nimport no_such_module_xyz\n" + GOOD,
            "compute_score",
            r"reward\.py:2: .*ModuleNotFoundError.*no_such_module_xyz",
        ),
        (GOOD, "score_fn", r"reward\.py: no function 'score_fn'.*compute_score"),
        ("def compute_score(text):\n    return 1.0\n", "compute_score", r"must accept keyword arguments"),
    ],
)
def test_broken_user_reward_function_fails_fast_naming_file_line_and_error(
    tmp_path: Path, source: str, name: str, message: str
) -> None:
    path = tmp_path / "reward.py"
    path.write_text(source)
    with pytest.raises(GrpoConfigError, match=message):
        validate_reward_function(str(path), name)


def test_function_reward_is_validated_when_the_config_is_built(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    path = tmp_path / "reward.py"
    path.write_text(GOOD)
    extra = f"reward.custom_reward_function.path: {path}\nreward.custom_reward_function.name: compute_score\n"
    config = _config(tmp_path, model_dir, verl_defaults, extra=extra, reward="function")
    assert config.reward.reward_manager.source == "register"  # verl's naive manager calls the function
    path.write_text("def compute_score(:\n")
    with pytest.raises(GrpoConfigError, match=r"reward\.py:1"):
        _config(tmp_path, model_dir, verl_defaults, extra=extra, reward="function")
