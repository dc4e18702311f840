"""Pure: the GPU pools verl 0.9.1 will ask Ray for, from the built config, and whether the Ray cluster's
nodes can hold them with each bundle on a node of its role.

verl builds them in its TaskRunner (trainer_base.init_resource_pool_mgr and, in separate_async mode, one
standalone pool per rollout replica in replica.init_standalone); the names map to our roles through
`placement.role_for_pool`. Each placement group is STRICT_PACK: all its bundles on one Ray node (one pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_trainer.placement import pinned_bundles, role_for_pool

# verl's max_colocate_count: the CPUs each GPU bundle asks for (trainer pools 3, standalone rollout 2).
TRAINER_POOL_CPUS = 3
ROLLOUT_POOL_CPUS = 2


@dataclass(frozen=True)
class Pool:
    """One verl resource pool: a placement group per entry of `process_on_nodes`, of that many GPU bundles."""

    name: str
    process_on_nodes: tuple[int, ...]
    cpus_per_bundle: int

    @property
    def role(self) -> str | None:
        return role_for_pool(self.name)

    def bundles(self, role_resources: Mapping[str, str]) -> list[list[dict[str, float]]]:
        """Each placement group's bundles as verl builds them, pinned to the role as our patch pins them."""
        bundle = {"CPU": float(self.cpus_per_bundle), "GPU": 1.0}
        return [pinned_bundles([dict(bundle) for _ in range(count)], self.name, role_resources)
                for count in self.process_on_nodes]


def _select(cfg: DictConfig, key: str, default: Any = None) -> Any:
    return OmegaConf.select(cfg, key, default=default)


def verl_pools(cfg: DictConfig) -> list[Pool]:
    """The pools a training run of this config creates, in verl's order."""
    pools = [Pool("global_pool", (int(cfg.trainer.n_gpus_per_node),) * int(cfg.trainer.nnodes), TRAINER_POOL_CPUS)]
    if _select(cfg, "reward.reward_model.enable_resource_pool", False):
        rm = cfg.reward.reward_model
        pools.append(Pool("reward_pool", (int(rm.n_gpus_per_node),) * int(rm.nnodes), TRAINER_POOL_CPUS))
    if _select(cfg, "trainer.v1.trainer_mode") == "separate_async":
        rollout = cfg.actor_rollout_ref.rollout
        per_node = int(rollout.n_gpus_per_node)
        tp = int(rollout.tensor_model_parallel_size)
        total = per_node * int(rollout.nnodes)
        # one standalone replica per tensor-parallel group; a replica wider than a pod spans pods
        shape = (tp,) if tp <= per_node else (per_node,) * (tp // per_node)
        pools += [Pool(f"rollout_pool_{rank}", shape, ROLLOUT_POOL_CPUS) for rank in range(total // tp)]
    return pools


@dataclass(frozen=True)
class RayNode:
    node_id: str
    resources: Mapping[str, float]


def unplaceable(pools: list[Pool], nodes: list[RayNode], role_resources: Mapping[str, str]) -> list[str]:
    """Why these pools cannot all be placed (empty when they can): first fit, placement group by
    placement group, on what each node offers. Says which pool, which role and what no node has."""
    free = {n.node_id: dict(n.resources) for n in nodes}
    problems: list[str] = []
    for pool in pools:
        for index, bundles in enumerate(pool.bundles(role_resources)):
            need: dict[str, float] = {}
            for bundle in bundles:
                for key, amount in bundle.items():
                    need[key] = need.get(key, 0.0) + amount
            home = next((node for node, offer in free.items()
                         if all(offer.get(k, 0.0) >= v for k, v in need.items())), None)
            if home is None:
                wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(need.items()))
                role = pool.role or "unpinned"
                problems.append(f"pool {pool.name} ({role}), placement group {index}: no Ray node offers {wanted} "
                                f"at once; nodes offer {_offers(nodes)}")
                continue
            for k, v in need.items():
                free[home][k] -= v
    return problems


def _offers(nodes: list[RayNode]) -> str:
    interesting = ("CPU", "GPU")
    parts = []
    for node in nodes:
        shown = {k: v for k, v in node.resources.items() if k in interesting or k.startswith("grpo.dev/")}
        parts.append("{" + ", ".join(f"{k}={v:g}" for k, v in sorted(shown.items())) + "}")
    return "; ".join(parts) or "nothing (no nodes)"
