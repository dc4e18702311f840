"""A rule reward GRPO can raise from random weights: how often one target word appears in the answer.

A user reward function in verl's form (`reward.custom_reward_function.path` = this file, `name` =
compute_score), loaded by grpo-train's `grpo.reward.type=function`. The score is the number of
occurrences of the target word divided by the response budget (64 tokens in the bench), so it lies in
[0, 1] and equals the target token's share of the answer when the word is one token, as " cat" is
for bench/gpu/tiny_model.py's tokenizer.

A random tiny model emits the target about once in 500 tokens, so a group of 4 answers to one prompt
usually differs in its count: GRPO's group advantage has a signal from the first step. Pushed hard
(a learning rate far too high), the policy collapses onto repeating the word: issue 18's "a reward
that pays for a single token".
"""

from __future__ import annotations

from typing import Any

TARGET = "cat"
BUDGET_TOKENS = 64


def target_share(text: str, target: str = TARGET, budget_tokens: int = BUDGET_TOKENS) -> float:
    """Pure: occurrences of `target` in `text` per response-budget token."""
    if not target or budget_tokens <= 0:
        raise ValueError("target must be non-empty and budget_tokens positive")
    return text.count(target) / budget_tokens


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    target: str = TARGET,
    budget_tokens: int = BUDGET_TOKENS,
    **_: Any,
) -> float:
    """verl calls this once per answer (reward_kwargs may set target and budget_tokens)."""
    return target_share(solution_str, target, budget_tokens)
