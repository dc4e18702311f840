"""verl's agent-loop workers and request load balancer, started while the model loads and vLLM starts.

verl 0.9.1's TaskRunnerV1.run creates the agent-loop workers (AgentLoopWorkerTQ actors, 8 by default) only
after "ready to fit": `init_agent_loop_manager` needs the rollout servers' load balancer and the reward
workers, which exist only then. Each worker is a process that imports torch, transformers and verl: on the
H200 machine step 1 waited 18-24 s for them (bench/gpu/RESULTS.md, issue 17.3), after a minute and more
in which the TaskRunner only waited for the model load and vLLM.

Here the TaskRunner's constructor starts the same number of workers of a subclass whose constructor does
nothing (`prestart`): their processes start and import everything then. When verl's `run` reaches
`init_agent_loop_manager`, GrpoTaskRunner creates `WarmAgentLoopManager`, which calls verl's own
AgentLoopWorkerTQ constructor in each worker (`bind`) with the arguments verl would have passed, and
uses them as verl would have used its own. What the workers do is verl's, unchanged. Should the warm
workers fail to bind, they are removed and verl's own workers are created instead.

The workers' first requests go through verl's GlobalRequestLoadBalancer, another actor whose process
(torch, verl: 15-23 s on the H200 machine) verl starts only when the rollout servers are up
(LLMServerManager._init_global_load_balancer). It starts empty here too (`prestart_load_balancer`,
verl's own class and arguments) and the rollout's LLMServerManager gets it with its servers added
(`GlobalRequestLoadBalancer.add_servers`, the state verl's constructor would have built). Only the
default balancer of the training rollout is taken so: a router plugin (rollout.router_config_path), an
injected balancer class or another manager (separate_async's standalone servers) gets verl's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from uuid import uuid4

import ray
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.router import DEFAULT_ROUTING_CACHE_SIZE, GlobalRequestLoadBalancer

log = logging.getLogger(__name__)

BOUND_LINE = "grpo-train: agent loop workers bound in "
_VerlWorker = AgentLoopWorkerTQ.__ray_actor_class__  # verl's class, without its @ray.remote wrapper


class GrpoAgentLoopWorkerTQ(_VerlWorker):
    """AgentLoopWorkerTQ whose process starts before verl's constructor arguments exist."""

    def __init__(self) -> None:  # the process is up and this module (verl, torch) imported: enough for now
        pass

    def bind(self, *args: Any, **kwargs: Any) -> None:
        """verl's constructor, with the arguments verl's AgentLoopManager passes to its workers."""
        _VerlWorker.__init__(self, *args, **kwargs)


_WarmWorker = ray.remote(GrpoAgentLoopWorkerTQ)
_warm: list[Any] = []


def prestart(num_workers: int) -> int:
    """Start `num_workers` warm workers, placed as verl's AgentLoopManager places its own (round-robin
    over the alive nodes with CPUs, soft node affinity); they wait for `WarmAgentLoopManager`."""
    if num_workers <= 0:
        return 0
    node_ids = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    for i in range(num_workers):
        _warm.append(
            _WarmWorker.options(
                name=f"agent_loop_worker_{i}" + f"_{uuid4().hex[:8]}",
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_ids[i % len(node_ids)], soft=True
                ),
            ).remote()
        )
    return num_workers


def take_warm(num_workers: int) -> list[Any]:
    """The warm workers, if there are as many as verl would create now; else none (and the others removed)."""
    workers = list(_warm)
    _warm.clear()
    if len(workers) == num_workers:
        return workers
    discard(workers)
    return []


def discard(workers: list[Any]) -> None:
    for worker in workers:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(worker)


class WarmAgentLoopManager(AgentLoopManagerTQ):
    """verl's AgentLoopManagerTQ that binds the warm workers instead of creating new ones."""

    async def _init_agent_loop_workers(self) -> None:
        workers = take_warm(self.rollout_config.agent.num_workers)
        if not workers:
            await super()._init_agent_loop_workers()
            return
        started = time.monotonic()
        try:
            await asyncio.gather(
                *[
                    worker.bind.remote(
                        self.config, self.llm_client, self.teacher_client, self.reward_loop_worker_handles
                    )
                    for worker in workers
                ]
            )
        except Exception:
            log.exception("grpo-train: warm agent loop workers did not bind; verl's own are created instead")
            discard(workers)
            await super()._init_agent_loop_workers()
            return
        self.agent_loop_workers = workers
        # one line a user (and the GPU bench's start-up breakdown) can read, as the constructor's
        print(f"{BOUND_LINE}{time.monotonic() - started:.1f} s ({len(workers)} started early)", flush=True)


# --------------------------------------------------------------------------------- the load balancer

_warm_balancer: dict[str, Any] = {}
_verl_init_global_load_balancer = LLMServerManager._init_global_load_balancer


def prestart_load_balancer(full_determinism: bool, preimport: tuple[str, ...] = ()) -> None:
    """verl's default balancer (router.py `_create_global_sticky_inflight`), started now with no servers;
    it then imports `preimport` (the rollout server's module: grpo_trainer.startup.task_runner.balancer_imports)."""
    handle = ray.remote(GlobalRequestLoadBalancer).remote(
        servers={}, max_cache_size=DEFAULT_ROUTING_CACHE_SIZE, full_determinism=full_determinism
    )
    if preimport:
        from grpo_trainer.startup.task_runner import import_in_actor

        # not awaited: the balancer runs its calls one at a time in order, so `add_servers` waits for the
        # import if it is still going; a failed import leaves `add_servers` to import the module, as before
        handle.__ray_call__.remote(import_in_actor, preimport)
    _warm_balancer["handle"] = handle
    _warm_balancer["full_determinism"] = bool(full_determinism)
    LLMServerManager._init_global_load_balancer = _init_global_load_balancer


def discard_unused_balancer() -> None:
    """The warm balancer if no manager took it (a router plugin, say): removed, not left idle."""
    if "handle" in _warm_balancer:
        discard([_warm_balancer.pop("handle")])


def _take_balancer(manager: LLMServerManager) -> Any:
    """The warm balancer, once, for the training rollout's default balancer only."""
    if (
        type(manager) is not LLMServerManager
        or manager.worker_group is None  # not the hybrid rollout (standalone or empty managers)
        or manager._load_balancer_cls is not None
        or getattr(manager.rollout_config, "router_config_path", None)
        or bool(getattr(manager.rollout_config, "full_determinism", False)) != _warm_balancer.get("full_determinism")
    ):
        return None
    return _warm_balancer.pop("handle", None)


async def _init_global_load_balancer(self: LLMServerManager) -> None:
    try:
        balancer = _take_balancer(self)
    except Exception:  # a verl whose manager looks otherwise: verl's own balancer
        log.exception("grpo-train: warm load balancer not taken")
        balancer = None
    if balancer is None:
        await _verl_init_global_load_balancer(self)
        return
    try:
        await balancer.add_servers.remote(dict(zip(self.server_addresses, self.server_handles, strict=True)))
    except Exception:
        log.exception("grpo-train: warm load balancer unusable; verl starts its own")
        discard([balancer])
        await _verl_init_global_load_balancer(self)
        return
    self.global_load_balancer = balancer
