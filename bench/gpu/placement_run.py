"""Role placement with a reward model on one GPU host (issue 17, item 2).

A Ray cluster of three nodes on the one machine, as our pods declare them: a head without GPUs, an actor
node with the GPU and `grpo.dev/actor`, a reward node with the same GPU and `grpo.dev/reward`. grpo-train
runs on it with a model reward (bench/gpu/tiny_model.py's random Qwen2 sequence classifier, served by
vLLM's /classify in verl's reward-model pool) and `grpo.placement.roleResources` naming both resources.
Afterwards Ray's state API says where every actor and placement-group bundle ran (placement_check.py),
and the GPU samples say which processes held GPU memory.

What it proves: our pinning puts verl 0.9.1's actor pool and its reward-model pool on the nodes that
declare their role, with real GPU processes, through the same code paths as the 8-GPU layout. What it does
not: anything about several physical GPUs (both worker nodes see the same device), NCCL between hosts,
or a standalone rollout pool (the disaggregated layout's separate_async trainer is not run here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raycluster import NodeSpec

ROLE_RESOURCES = (("actor", "grpo.dev/actor"), ("reward", "grpo.dev/reward"))
# verl asks 3 CPUs per GPU bundle; the rest of a node's CPUs host CPU actors (agent and reward loops)
NODE_CPUS = 8


def nodes(cpus: int = NODE_CPUS) -> tuple[NodeSpec, ...]:
    """Pure: head, actor node and reward node, each GPU node with its role resource (1 per GPU)."""
    return (
        NodeSpec("head", num_cpus=cpus),
        *(NodeSpec(role, num_cpus=cpus, num_gpus=1, resources=((res, 1.0),)) for role, res in ROLE_RESOURCES),
    )


def query_state(dashboard_url: str) -> dict[str, list[dict[str, Any]]]:
    """Nodes, actors (dead ones too: the run is over) and placement groups from Ray's state API."""
    from ray.util.state import list_actors, list_nodes, list_placement_groups

    common: dict[str, Any] = {
        "address": dashboard_url,
        "detail": True,
        "limit": 10000,
        "raise_on_missing_output": False,
    }
    return {
        "nodes": [_plain(n) for n in list_nodes(**common)],
        "actors": [_plain(a) for a in list_actors(**common)],
        "placement_groups": [_plain(p) for p in list_placement_groups(**common)],
    }


def merge_states(during: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """Pure: nodes and actors from after the run (dead actors keep their node), placement groups from
    during it (once the job ends verl's groups are removed and their bundles lose their nodes)."""
    if during is None:
        return after
    return {**after, "placement_groups": during["placement_groups"]}


def _plain(record: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    return asdict(record) if is_dataclass(record) else dict(record)


def gpu_samples(path: Path) -> tuple[dict[int, int], dict[int, int]] | None:
    """(GPU MiB by pid, parent by pid) from a GpuWatch dump; None when nvidia-smi gave nothing."""
    import json

    data = json.loads(path.read_text())
    if not data["samples"]:
        return None
    return (
        {int(k): v for k, v in data["gpu_mib_by_pid"].items()},
        {int(k): v for k, v in data["parents"].items()},
    )
