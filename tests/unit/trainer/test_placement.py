"""Role placement: verl 0.9.1's own resource pools, created inside a Ray worker (where verl creates
them), on a real local multi-node Ray cluster with fake GPUs and our role resources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from grpo_trainer.config import worker_env
from grpo_trainer.placement import pinned_bundles, role_for_pool
from grpo_trainer.settings import GrpoSettings
from grpo_trainer.worker_setup import SETUP_HOOK
from ray_nodes import ray_nodes

ROLE_RESOURCES = {"actor": "grpo.dev/actor", "rollout": "grpo.dev/rollout", "reward": "grpo.dev/reward"}
# node -> (GPUs, role); every GPU needs verl's 3 CPUs per bundle (2 for standalone rollout pools)
NODES = {"actor": 4, "rollout": 2, "reward": 2}


@pytest.mark.parametrize(
    ("pool", "role"),
    [
        ("global_pool", "actor"),
        ("reward_pool", "reward"),
        ("rollout_pool_0", "rollout"),
        ("rollout_pool_3_v2", "rollout"),
        ("rollout_pool_reward_0", "reward"),
        ("rollout_pool_teacher_0", None),
        ("teacher_pool", None),
        ("something_else", None),
    ],
)
def test_verl_pool_names_map_to_roles(pool: str, role: str | None) -> None:
    assert role_for_pool(pool) == role


def test_bundles_of_unconfigured_roles_stay_as_verl_built_them() -> None:
    bundles = [{"CPU": 3.0, "GPU": 1.0}]
    assert pinned_bundles(bundles, "global_pool", ROLE_RESOURCES) == [{"CPU": 3.0, "GPU": 1.0, "grpo.dev/actor": 1.0}]
    assert pinned_bundles(bundles, "rollout_pool_0", {"actor": "grpo.dev/actor"}) is bundles


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    pytest.importorskip("ray")
    nodes = [{"num_cpus": 3 * gpus, "num_gpus": gpus, "resources": {ROLE_RESOURCES[role]: gpus}}
             for role, gpus in NODES.items()]
    with ray_nodes({"num_cpus": 2, "resources": {"head": 1}}, nodes) as cluster:
        yield cluster


def _create_pools(specs: list[tuple[dict[str, list[int]], int]]) -> dict[str, list[dict[str, Any]]]:
    """Runs in a Ray worker: create verl's pools and report, per bundle, its node's role and its spec."""
    import ray
    from verl.single_controller.ray.base import ResourcePoolManager

    node_role = {}
    for node in ray.nodes():
        roles = [r for r, res in ROLE_RESOURCES.items() if res in node["Resources"]]
        node_role[node["NodeID"]] = roles[0] if roles else "head"

    placed: dict[str, list[dict[str, Any]]] = {}
    for spec, max_colocate in specs:
        # exactly how verl 0.9.1 builds them: trainer_base (global/reward) and replica.init_standalone
        manager = ResourcePoolManager(resource_pool_spec=spec, mapping={}, max_colocate_count=max_colocate)
        manager.create_resource_pool()
        for name, pool in manager.resource_pool_dict.items():
            placed[name] = []
            for pg in pool.get_placement_groups():
                table = ray.util.placement_group_table(pg)
                for idx, node_id in table["bundles_to_node_id"].items():
                    placed[name].append({"node": node_role[node_id], "bundle": table["bundles"][idx]})
    return placed


def _run_in_worker(ray_cluster: Any, runtime_env: dict[str, Any], specs: list[Any]) -> dict[str, Any]:
    import sys

    import ray
    from ray import cloudpickle

    # the test module is not importable in Ray's workers: ship _create_pools by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.shutdown()
    ray.init(address=ray_cluster.address, runtime_env=runtime_env, include_dashboard=False)
    try:
        task = ray.remote(num_cpus=1, resources={"head": 0.01})(_create_pools)
        return ray.get(task.remote(specs), timeout=120)
    finally:
        ray.shutdown()  # the job's placement groups go with it


@pytest.mark.slow
def test_patched_verl_pools_put_every_bundle_on_its_roles_nodes(ray_cluster: Any) -> None:
    settings = GrpoSettings.model_validate({"placement": {"mode": "disaggregated", "roleResources": ROLE_RESOURCES}})
    runtime_env = {"worker_process_setup_hook": SETUP_HOOK, "env_vars": worker_env(settings, {})}
    placed = _run_in_worker(
        ray_cluster,
        runtime_env,
        # reward first: unpinned, Ray would be free to put it on the actor node
        [({"reward_pool": [2], "global_pool": [2, 2]}, 3), ({"rollout_pool_0": [2]}, 2)],
    )
    assert {b["node"] for b in placed["global_pool"]} == {"actor"}
    assert len(placed["global_pool"]) == 4
    assert {b["node"] for b in placed["reward_pool"]} == {"reward"}
    assert {b["node"] for b in placed["rollout_pool_0"]} == {"rollout"}
    assert all(b["bundle"].get("grpo.dev/actor") == 1 for b in placed["global_pool"])
    assert all(b["bundle"].get("grpo.dev/reward") == 1 for b in placed["reward_pool"])
    assert all(b["bundle"].get("GPU") == 1 for bundles in placed.values() for b in bundles)


@pytest.mark.slow
def test_without_the_patch_verl_pools_are_not_pinned(ray_cluster: Any) -> None:
    # the same job without our worker setup hook: verl's bundles ask only for CPU and GPU, so a pool
    # bigger than the actor node spills actor bundles onto the rollout and reward nodes
    placed = _run_in_worker(ray_cluster, {}, [({"global_pool": [2, 2, 2, 2]}, 3)])
    nodes = [b["node"] for b in placed["global_pool"]]
    assert sorted(set(nodes)) == ["actor", "reward", "rollout"]
    assert not any(k.startswith("grpo.dev/") for b in placed["global_pool"] for k in b["bundle"])
