"""CPU: the target-word reward (bench/gpu/token_reward.py), called as verl's reward loop calls it."""

from __future__ import annotations

import pytest
import token_reward


def test_the_score_is_the_target_count_per_budget_token() -> None:
    assert token_reward.target_share("cat dog cat", budget_tokens=64) == 2 / 64
    assert token_reward.target_share("dog", budget_tokens=64) == 0.0


def test_verl_keyword_call_with_reward_kwargs() -> None:
    score = token_reward.compute_score(
        data_source="tiny", solution_str="a tree a", ground_truth="", extra_info={"i": 1}, target="tree"
    )
    assert score == 1 / 64


def test_the_tiny_tokenizer_has_the_target_as_one_token(tmp_path) -> None:
    import tiny_model

    tok = tiny_model.build_tokenizer(1024)
    ids = tok.encode(" " + token_reward.TARGET, add_special_tokens=False)
    assert len(ids) == 1  # so the score is the target token's share of the answer


def test_an_empty_target_is_refused() -> None:
    with pytest.raises(ValueError):
        token_reward.target_share("x", target="")
