"""The `length` reward: score = number of valid (non-padding) response tokens.

verl 0.9.1 loads it through `reward.reward_manager.source=importlib` (the keys are in
grpo_trainer.reward.length_keys);
the older `reward_model.reward_manager` key is silently ignored by 0.9.1's main_ppo, which is why the
config builder refuses that key instead of passing it on.
"""

from __future__ import annotations

from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase


def valid_response_length(data_item: Any) -> int:
    """Valid response tokens of one sample: the response part of its attention mask."""
    response_len = data_item.batch["responses"].shape[-1]
    return int(data_item.batch["attention_mask"][-response_len:].sum().item())


class LengthRewardManager(RewardManagerBase):
    """Rewards longer answers; the reference setup's sanity reward (no model, runs on CPU)."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, **kwargs: Any) -> None:
        # verl passes reward_router_address / reward_model_tokenizer to every manager; unused here.
        super().__init__(config, tokenizer, compute_score)

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        item = data[-1:][0]  # multi-sequence outputs are scored on the last sequence, as verl's managers do
        length = valid_response_length(item)
        return {"reward_score": float(length), "reward_extra_info": {"response_tokens": length}}
