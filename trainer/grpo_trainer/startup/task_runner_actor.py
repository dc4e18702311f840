"""The TaskRunner grpo-train runs: verl's TaskRunnerV1 whose constructor runs a Preload.

A module of its own because it imports verl's main_ppo (torch, transformers) at import: only the TaskRunner
actor's process loads it (grpo_trainer.startup.task_runner_host builds it there), never the driver.
"""

from __future__ import annotations

import os
import sys

import ray
from verl.trainer.main_ppo import TaskRunnerV1

from grpo_trainer.startup.early_servers import actor_node
from grpo_trainer.startup.task_runner import (
    PREPARED_LINE,
    Preload,
    balancer_imports,
    join_transfer_queue,
    rollout_server_module,
    run_preload,
)
from grpo_trainer.worker_setup import role_resources_from_env

EARLY_SERVERS_LINE = "grpo-train: rollout servers started early: "
NO_EARLY_SERVERS_LINE = "grpo-train: rollout servers not started early: "


class GrpoTaskRunnerV1(TaskRunnerV1.__ray_actor_class__):  # verl's class, without its @ray.remote wrapper
    def __init__(self, plan: Preload | None = None) -> None:
        super().__init__()
        self._warm_agent_workers = 0
        if plan is not None:
            took = run_preload(plan)
            start_rollout_servers(plan)  # before the other early starts: on the path to step 1 (early_servers)
            if plan.agent_loop_workers > 0:
                from grpo_trainer.startup import agent_loop

                # their processes start (and import verl, torch) while the model loads and vLLM starts;
                # should that fail, verl creates its own workers after "ready to fit", as before
                try:
                    preimport = balancer_imports(plan, rollout_server_module(plan.rollout_engine))
                    agent_loop.prestart_load_balancer(plan.full_determinism, preimport)
                    self._warm_agent_workers = agent_loop.prestart(plan.agent_loop_workers)
                except Exception as e:
                    print(f"grpo-train: agent loop workers not started early: {e!r}", flush=True)
            # last: the processes above need none of it, and it may still be starting beside us
            took.update(join_transfer_queue(plan))
            # one line a user (and the GPU bench's start-up breakdown) can read
            print(PREPARED_LINE + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in took.items()), flush=True)

    def init_agent_loop_manager(self):
        """verl's, with the agent-loop workers started in the constructor (grpo_trainer.startup.agent_loop)."""
        if "grpo_trainer.startup.agent_loop" in sys.modules:
            # the rollout servers are up: their manager took the early load balancer, or nobody will
            sys.modules["grpo_trainer.startup.agent_loop"].discard_unused_balancer()
        if "grpo_trainer.startup.rollout_server" in sys.modules:
            sys.modules["grpo_trainer.startup.rollout_server"].discard_unused()
        if not self._warm_agent_workers:
            return super().init_agent_loop_manager()
        from grpo_trainer.startup.agent_loop import WarmAgentLoopManager

        self.agent_loop_manager = WarmAgentLoopManager.create(
            config=self.config,
            llm_client=self.trainer.get_llm_client(),
            teacher_client=self.trainer.get_teacher_client(),
            reward_loop_worker_handles=self.trainer.get_reward_handles(),
        )


def start_rollout_servers(plan: Preload) -> None:
    """The plan's rollout servers, on the one node that can hold the actor pool; never fails the constructor
    (verl then starts its own servers, as before)."""
    if plan.early_servers is None:
        print(NO_EARLY_SERVERS_LINE + plan.early_servers_skipped, flush=True)
        return
    try:
        actor_resource = role_resources_from_env(os.environ).get("actor")
        node = actor_node(ray.nodes(), plan.early_servers, actor_resource)
        if node is None:
            print(f"{NO_EARLY_SERVERS_LINE}not exactly one alive node offers {plan.early_servers.gpus_per_node} "
                  f"GPUs{f' and {actor_resource}' if actor_resource else ''}", flush=True)
            return
        from grpo_trainer.startup import rollout_server

        names = rollout_server.prestart(plan.early_servers, node)
        print(f"{EARLY_SERVERS_LINE}{', '.join(names)} on node {node}", flush=True)
    except Exception as e:
        print(f"{NO_EARLY_SERVERS_LINE}{e!r}", flush=True)

