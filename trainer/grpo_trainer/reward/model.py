"""verl 0.9.1's reward model in a pool of its own (reward.reward_model.enable_resource_pool), made to finish a step.

Two defects of verl 0.9.1 stop that path; bench/gpu/RESULTS.md (session 2026-12-03, placement run) hung on the first:

1. The reward model's vLLM server is put to sleep as it starts (reward_model.py:48, rollout.free_cache_engine,
   true by default) and only RewardLoopManager.compute_rm_score wakes it (reward_loop.py:345), which verl skips
   when the reward model has its own pool: the agent loop then calls the reward-loop workers directly
   (reward_loop.py:320, agent_loop.py:1025). vLLM 0.24 keeps a sleeping engine's scheduler paused: requests are
   queued, never run (v1/engine/core.py:761, v1/core/sched/scheduler.py:626), and verl's reward client and router
   wait without a timeout (reward_loop.py:163, router/naive_router.py:250). FREE_CACHE_ENGINE_KEY=false (set by
   the config builder) keeps the server awake: it holds its own GPUs, there is nothing to share them with.
2. RewardLoopWorker.compute_score_disrm returns {"reward_score": x} alone (reward_loop.py:270), and the agent loop
   reads result["reward_extra_info"] (agent_loop.py:1028): a KeyError fails every sample. `install` adds the empty
   dict the rule-based managers would give.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

REWARD_LOOP_MODULE = "verl.experimental.reward_loop.reward_loop"
FREE_CACHE_ENGINE_KEY = "reward.reward_model.rollout.free_cache_engine"
PATCHED = "__grpo_original__"


def install(module: ModuleType) -> None:
    """Patch the module's RewardLoopWorker (once): its model scores carry an (empty) reward_extra_info."""
    worker = module.RewardLoopWorker
    original = worker.compute_score_disrm
    if hasattr(original, PATCHED):
        return

    @functools.wraps(original)
    async def compute_score_disrm(self: Any, data: Any) -> dict[str, Any]:
        result = await original(self, data)
        result.setdefault("reward_extra_info", {})
        return result

    setattr(compute_score_disrm, PATCHED, original)
    worker.compute_score_disrm = compute_score_disrm
