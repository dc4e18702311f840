"""Which of verl's vLLM rollout servers grpo-train starts early, and where (pure: no Ray, no verl).

verl 0.9.1 creates the training rollout's vLLM server actors (`vllm_server_<replica>_<node>`) only after
the actor's model is loaded (trainer_base.py `_setup`, step 9), and each server's process then imports
vLLM before verl can launch its engine: 24-26 s on the H200 machine, one after the other with the model
load (bench/gpu/RESULTS.md, issue 17.3). grpo_trainer.startup.rollout_server starts those processes in the
TaskRunner's constructor instead and binds them when verl asks for its servers.

A server must be created with the name and on the node verl will ask for, since verl's workers find their
server by name. Both are known before the worker group exists only when the actor pool is one node and the
cluster has exactly one node that can hold it; otherwise nothing is started early. verl's own options are
compared with the early server's when verl creates its servers, and any difference means verl's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_trainer.startup.vllm_executor import select_plain as _select

# verl 0.9.1, vllm_async_server.py vLLMReplica.launch_servers (the training rollout: no reward or teacher infix)
SERVER_NAME = "vllm_server_{replica}_{node}"
# verl 0.9.1, replica.py RolloutReplica.max_concurrency: Ray's default for async actors, or more
MIN_CONCURRENCY = 1000
CONTROL_METHOD_CONCURRENCY = 16


@dataclass(frozen=True)
class EarlyServers:
    """The rollout servers to start before verl asks for them (all on the actor pool's one node)."""

    names: tuple[str, ...]
    gpus_per_node: int  # the node must offer the actor pool's GPUs
    max_concurrency: int


def plan_early_servers(config: Mapping[str, Any]) -> tuple[EarlyServers | None, str]:
    """Pure: the servers to start early for a resolved verl config (a plain mapping), or None and why not."""
    rollout = _select(config, "actor_rollout_ref.rollout", {})
    if rollout.get("name") != "vllm":
        return None, f"rollout engine {rollout.get('name')!r}, not vllm"
    if not _select(config, "actor_rollout_ref.hybrid_engine", True):
        return None, "actor_rollout_ref.hybrid_engine=false: verl starts standalone servers"
    if _select(rollout, "disaggregation.enabled", False):
        return None, "prefill/decode disaggregation: verl's PD replicas name their servers otherwise"
    nnodes = int(_select(config, "trainer.nnodes", 1))
    gpus_per_node = int(_select(config, "trainer.n_gpus_per_node", 1))
    if nnodes != 1:
        return None, f"trainer.nnodes={nnodes}: which node each server needs is known only once the workers run"
    replica_gpus = 1
    for key in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
        replica_gpus *= int(rollout.get(key) or 1)
    if replica_gpus > gpus_per_node or gpus_per_node % replica_gpus:
        return None, f"{replica_gpus} GPUs per rollout replica do not divide the node's {gpus_per_node}"
    names = tuple(SERVER_NAME.format(replica=r, node=0) for r in range(gpus_per_node // replica_gpus))
    concurrency = max(MIN_CONCURRENCY, int(rollout.get("max_num_seqs") or 0) + CONTROL_METHOD_CONCURRENCY)
    return EarlyServers(names=names, gpus_per_node=gpus_per_node, max_concurrency=concurrency), ""


def actor_node(nodes: list[Mapping[str, Any]], plan: EarlyServers, actor_resource: str | None) -> str | None:
    """Pure: the one alive node (of `ray.nodes()`) that can hold the actor pool; None if none or several."""
    candidates = [
        node["NodeID"]
        for node in nodes
        if node.get("Alive")
        and float(node.get("Resources", {}).get("GPU", 0)) >= plan.gpus_per_node
        and (actor_resource is None or float(node.get("Resources", {}).get(actor_resource, 0)) > 0)
    ]
    return candidates[0] if len(candidates) == 1 else None


def early_options(name: str, node_id: str, env_vars: Mapping[str, str], max_concurrency: int) -> dict[str, Any]:
    """Pure: the actor options verl gives the server (launch_servers), as plain data; Ray's form is built
    from it (rollout_server.ray_options)."""
    return {
        "name": name,
        "node_id": node_id,
        "soft": False,
        "runtime_env": {"env_vars": dict(env_vars)},
        "max_concurrency": max_concurrency,
    }


def options_mismatch(early: Mapping[str, Any], asked: Mapping[str, Any]) -> str | None:
    """Pure: why the server started early does not stand for the one verl asks for (None: it does).
    Both in `early_options`' form."""
    for key in sorted(set(early) | set(asked)):
        if early.get(key) != asked.get(key):
            return f"{key}: started with {early.get(key)!r}, verl asks for {asked.get(key)!r}"
    return None


def asked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: verl's `server_class.options(...)` keywords in `early_options`' form (the node affinity
    strategy's node and softness as keys of their own; any other option kept, so that it mismatches)."""
    strategy = options.get("scheduling_strategy")
    plain = {key: value for key, value in options.items() if key != "scheduling_strategy"}
    return {**plain, "node_id": getattr(strategy, "node_id", None), "soft": getattr(strategy, "soft", None)}
