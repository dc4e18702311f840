"""CPU: the role-placement verdict read from Ray's state records (bench/gpu/placement_check.py)."""

from __future__ import annotations

import placement_check as pc

NODES = [
    {"node_id": "h", "is_head_node": True, "resources_total": {"CPU": 8.0}},
    {"node_id": "a", "is_head_node": False, "resources_total": {"CPU": 8.0, "GPU": 1.0, "grpo.dev/actor": 1.0}},
    {"node_id": "r", "is_head_node": False, "resources_total": {"CPU": 8.0, "GPU": 1.0, "grpo.dev/reward": 1.0}},
]


def actor(name: str, cls: str, node: str, pid: int) -> dict:
    return {"name": name, "class_name": cls, "node_id": node, "pid": pid}


# what verl 0.9.1 names the actors of a colocated run with a reward-model pool
GOOD = [
    actor("", "GrpoTaskRunner", "h", 10),
    actor("Ab3xYzWorkerDict_0:0", "WorkerDict", "a", 11),
    actor("vllm_server_0_0", "vLLMHttpServer", "a", 12),
    actor("rollout_reward_colocate_0CheckpointEngineWorker_0:0", "CheckpointEngineWorker", "r", 13),
    actor("vllm_server_reward_0_0", "vLLMHttpServer", "r", 14),
    actor("agent_loop_worker_0_ab12", "AgentLoopWorkerTQ", "r", 15),
    actor("TransferQueueController", "TransferQueueController", "a", 16),
]
PGS = [
    {"name": "global_pool", "bundles": [{"node_id": "a", "unit_resources": {"CPU": 3, "GPU": 1, "grpo.dev/actor": 1}}]},
    {
        "name": "reward_pool",
        "bundles": [{"node_id": "r", "unit_resources": {"CPU": 3, "GPU": 1, "grpo.dev/reward": 1}}],
    },
]


def test_node_and_actor_roles_come_from_resources_and_verls_names() -> None:
    assert [pc.node_role(n) for n in NODES] == ["head", "actor", "reward"]
    assert [pc.actor_role(a) for a in GOOD] == [None, "actor", "actor", "reward", "reward", None, None]


def test_every_role_on_its_node_passes_and_cpu_actors_go_anywhere() -> None:
    result = pc.check(NODES, GOOD, PGS)
    assert result.passed, result.violations
    assert result.summary()["actors_by_role"]["reward"] == [
        "rollout_reward_colocate_0CheckpointEngineWorker_0:0 on reward",
        "vllm_server_reward_0_0 on reward",
    ]


def test_an_actor_worker_on_the_reward_node_is_a_violation() -> None:
    moved = [{**a, "node_id": "r"} if a["class_name"] == "WorkerDict" else a for a in GOOD]
    assert pc.check(NODES, moved, PGS).violations == ["Ab3xYzWorkerDict_0:0 (actor) ran on the reward node"]


def test_a_role_without_actors_fails_rather_than_passing_vacuously() -> None:
    no_reward = [a for a in GOOD if pc.actor_role(a) != "reward"]
    assert pc.check(NODES, no_reward, PGS).violations == [
        "no actor of the reward role was found: nothing to check for it"
    ]


def test_a_role_bundle_elsewhere_is_a_violation() -> None:
    pgs = [{"name": "reward_pool", "bundles": [{"node_id": "a", "unit_resources": {"GPU": 1, "grpo.dev/reward": 1}}]}]
    assert pc.check(NODES, GOOD, pgs).violations == [
        "placement group reward_pool: a reward bundle is on the actor node"
    ]


def test_gpu_memory_is_counted_under_each_role_and_the_reward_model_must_hold_some() -> None:
    # the reward server (14) spawned its engine (20) which spawned the worker (21) that holds the GPU
    parents = {20: 14, 21: 20, 30: 12, 31: 30, 11: 1}
    result = pc.check(NODES, GOOD, PGS, gpu_mib_by_pid={21: 1500, 31: 42000, 11: 900}, parents=parents)
    assert result.passed
    assert result.gpu_mib_by_role == {"actor": 42900, "reward": 1500}
    assert result.reward_gpu_mib == 1500
    idle = pc.check(NODES, GOOD, PGS, gpu_mib_by_pid={31: 42000}, parents=parents)
    assert idle.violations == ["no GPU memory was held by any process of the reward model's vLLM server"]


def test_descendants_follow_parent_chains_only() -> None:
    assert pc.descendants(14, {20: 14, 21: 20, 22: 1, 23: 22}) == {14, 20, 21}
