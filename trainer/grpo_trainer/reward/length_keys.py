"""The verl keys that select the `length` reward manager (grpo_trainer.reward.length).

A module of its own, without verl: the config builder sets these keys in the driver before verl is imported
(grpo_trainer.startup.ray_start), while the manager's own module imports verl's reward loop.
"""

from __future__ import annotations

# module path in verl's `pkg://` form, so the class is imported by name and is the very class defined in
# grpo_trainer.reward.length, not a copy loaded from a file
LENGTH_REWARD_MANAGER_KEYS: dict[str, str] = {
    "reward.reward_manager.source": "importlib",
    "reward.reward_manager.name": "LengthRewardManager",
    "reward.reward_manager.module.path": "pkg://grpo_trainer.reward.length",
}
