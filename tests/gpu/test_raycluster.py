"""CPU: a multi-node Ray cluster on this one machine, started with `ray start` as our pods start Ray
(bench/gpu/raycluster.py), with fake GPUs; verl 0.9.1's pools pinned by our worker hook; the verdict
read back from Ray's state API (bench/gpu/placement_run.py, placement_check.py): the wiring of the GPU
placement run, short of vLLM and the GPU itself."""

from __future__ import annotations

import socket
import sys
from typing import Any

import placement_check
import placement_run
import pytest
from raycluster import JOB_MODULUS, NodeSpec, Ports, connects_needed, job_number, start_command


def test_start_commands_declare_what_our_pods_declare() -> None:
    ports = Ports(gcs=6380, dashboard=8266, client_server=10002, agents=(52400, 52401, 52402))
    head, actor_node, _ = (start_command(n, ports, i, python="py") for i, n in enumerate(placement_run.nodes(4)))
    assert head[:4] == ["py", "-m", "ray.scripts.scripts", "start"] and "--block" in head
    assert {"--head", "--port=6380", "--num-gpus=0", "--dashboard-port=8266", "--include-dashboard=true"} <= set(head)
    assert {"--address=127.0.0.1:6380", "--num-gpus=1", '--resources={"grpo.dev/actor": 1.0}'} <= set(actor_node)
    assert "--include-log-monitor=false" in actor_node and "--dashboard-agent-listen-port=52401" in actor_node
    assert "--min-worker-port=0" in actor_node  # worker ports from the OS: clusters on one machine never clash


def test_job_slots_give_parallel_clusters_distinct_job_numbers() -> None:
    assert job_number("05000000") == 5 and job_number("00010000") == 256
    for last in range(40):
        nexts = {last + connects_needed(last, slot) + 1 for slot in range(4)}
        assert len({n % JOB_MODULUS for n in nexts}) == 4  # whatever each cluster's own count, never equal


def _pools_and_actors() -> dict[str, Any]:
    """Runs in a Ray worker of the job: verl's own pools, then actors in their bundles named as verl names them."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from verl.single_controller.ray.base import ResourcePoolManager

    manager = ResourcePoolManager(
        resource_pool_spec={"global_pool": [1], "reward_pool": [1]}, mapping={}, max_colocate_count=3
    )
    manager.create_resource_pool()

    @ray.remote(num_cpus=0, num_gpus=0)
    class Probe:
        def ready(self) -> bool:
            return True

    names = {
        "global_pool": ["abcdefWorkerDict_0:0"],
        "reward_pool": ["rollout_reward_colocate_0CheckpointEngineWorker_0:0"],
    }
    handles = []
    for pool_name, pool in manager.resource_pool_dict.items():
        pg = pool.get_placement_groups()[0]
        ray.get(pg.ready())
        for name in names[pool_name]:
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0)
            handles.append(Probe.options(name=name, scheduling_strategy=strategy).remote())
    ray.get([h.ready.remote() for h in handles])
    return {"actors": len(handles)}


@pytest.mark.slow
def test_a_three_node_cluster_pins_verls_pools_and_the_state_api_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("verl")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # as the cluster runs (raycluster.cluster_env)
    import ray
    from grpo_trainer.config import worker_env
    from grpo_trainer.settings import GrpoSettings
    from grpo_trainer.worker_setup import SETUP_HOOK
    from ray import cloudpickle
    from raycluster import RayCluster

    nodes = placement_run.nodes(cpus=4)
    cluster = RayCluster(nodes, dashboard=True).start(timeout_s=180)
    try:
        job = cluster.reserve_job_number(2)
        assert job % JOB_MODULUS == 3 and job > cluster.last_job
        settings = GrpoSettings.model_validate({"placement": {"roleResources": dict(placement_run.ROLE_RESOURCES)}})
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ray.init(
            address=cluster.address,
            runtime_env={"worker_process_setup_hook": SETUP_HOOK, "env_vars": worker_env(settings, {})},
        )
        try:
            assert job_number(ray.get_runtime_context().get_job_id()) == job
            task = ray.remote(num_cpus=1)(_pools_and_actors)
            assert ray.get(task.remote(), timeout=180) == {"actors": 2}
            state = placement_run.query_state(cluster.dashboard_url)  # while the job and its pools live
        finally:
            ray.shutdown()
        result = placement_check.check(state["nodes"], state["actors"], state["placement_groups"])
        assert result.passed, result.violations
        assert {p.role: p.node for p in result.placed} == {"actor": "actor", "reward": "reward"}
        assert {n["node_name"] for n in state["nodes"]} == {"head", "actor", "reward"}
    finally:
        cluster.stop()
    with socket.socket() as s:  # the cluster's GCS port is free again: its processes are gone
        s.bind(("127.0.0.1", cluster.ports.gcs))


@pytest.mark.slow
def test_a_cluster_that_cannot_start_says_so() -> None:
    from raycluster import RayCluster

    bad = RayCluster((NodeSpec("head", num_cpus=1, resources=(("grpo.dev/actor", -1.0),)),))  # Ray refuses it
    with pytest.raises(RuntimeError, match="ray start exited early"):
        bad.start(timeout_s=60)
