"""The TaskRunner actor class grpo-train starts: verl's TaskRunnerV1 whose constructor runs a Preload.

A module of its own because it imports verl's main_ppo (torch, transformers) at import: only the
driver's run path and the actor's process load it, never the config builder or --dry-run.
"""

from __future__ import annotations

import sys

import ray
from verl.trainer.main_ppo import TaskRunnerV1

from grpo_trainer.task_runner import PREPARED_LINE, Preload, balancer_imports, rollout_server_module, run_preload


class GrpoTaskRunner(TaskRunnerV1.__ray_actor_class__):  # verl's class, without its @ray.remote wrapper
    def __init__(self, plan: Preload | None = None) -> None:
        super().__init__()
        self._warm_agent_workers = 0
        if plan is not None:
            took = run_preload(plan)
            if plan.agent_loop_workers > 0:
                from grpo_trainer import agent_loop

                # their processes start (and import verl, torch) while the model loads and vLLM starts;
                # should that fail, verl creates its own workers after "ready to fit", as before
                try:
                    preimport = balancer_imports(plan, rollout_server_module(plan.rollout_engine))
                    agent_loop.prestart_load_balancer(plan.full_determinism, preimport)
                    self._warm_agent_workers = agent_loop.prestart(plan.agent_loop_workers)
                except Exception as e:
                    print(f"grpo-train: agent loop workers not started early: {e!r}", flush=True)
            # one line a user (and the GPU bench's start-up breakdown) can read
            print(PREPARED_LINE + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in took.items()), flush=True)

    def init_agent_loop_manager(self):
        """verl's, with the agent-loop workers started in the constructor (grpo_trainer.agent_loop)."""
        if "grpo_trainer.agent_loop" in sys.modules:
            # the rollout servers are up: their manager took the early load balancer, or nobody will
            sys.modules["grpo_trainer.agent_loop"].discard_unused_balancer()
        if not self._warm_agent_workers:
            return super().init_agent_loop_manager()
        from grpo_trainer.agent_loop import WarmAgentLoopManager

        self.agent_loop_manager = WarmAgentLoopManager.create(
            config=self.config,
            llm_client=self.trainer.get_llm_client(),
            teacher_client=self.trainer.get_teacher_client(),
            reward_loop_worker_handles=self.trainer.get_reward_handles(),
        )


GrpoTaskRunnerActor = ray.remote(GrpoTaskRunner)
