"""The rehearsal's plan of verl's pools from a config, and whether the Ray nodes can hold them."""

from __future__ import annotations

from grpo_trainer.rehearsal.pools import Pool, RayNode, unplaceable, verl_pools
from omegaconf import OmegaConf

ROLES = {"actor": "grpo.dev/actor", "rollout": "grpo.dev/rollout", "reward": "grpo.dev/reward"}


def _cfg(**keys: object) -> OmegaConf:
    base = {"trainer.n_gpus_per_node": 4, "trainer.nnodes": 1, "reward.reward_model.enable_resource_pool": False,
            "trainer.v1.trainer_mode": "colocate"}
    cfg = OmegaConf.create({})
    for key, value in {**base, **keys}.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def test_colocated_config_asks_for_the_actor_pool_only() -> None:
    assert verl_pools(_cfg()) == [Pool("global_pool", (4,), 3)]


def test_reference_layout_asks_for_actor_reward_and_one_pool_per_rollout_replica() -> None:
    cfg = _cfg(**{"reward.reward_model.enable_resource_pool": True, "reward.reward_model.n_gpus_per_node": 2,
                  "reward.reward_model.nnodes": 1, "trainer.v1.trainer_mode": "separate_async",
                  "actor_rollout_ref.rollout.n_gpus_per_node": 2, "actor_rollout_ref.rollout.nnodes": 1,
                  "actor_rollout_ref.rollout.tensor_model_parallel_size": 2})
    pools = verl_pools(cfg)
    assert [(p.name, p.role, p.process_on_nodes, p.cpus_per_bundle) for p in pools] == [
        ("global_pool", "actor", (4,), 3), ("reward_pool", "reward", (2,), 3), ("rollout_pool_0", "rollout", (2,), 2)]


def test_bundles_carry_the_roles_resource() -> None:
    assert Pool("reward_pool", (2,), 3).bundles(ROLES) == [[{"CPU": 3.0, "GPU": 1.0, "grpo.dev/reward": 1.0}] * 2]


def _node(name: str, role: str | None, gpus: int, cpus: int | None = None) -> RayNode:
    resources = {"CPU": float(cpus if cpus is not None else 3 * gpus + 1), "GPU": float(gpus)}
    if role:
        resources[ROLES[role]] = float(gpus)
    return RayNode(name, resources)


def test_pools_fit_pods_of_their_roles() -> None:
    nodes = [_node("head", None, 0, 8), _node("a", "actor", 4), _node("r", "reward", 2)]
    assert unplaceable([Pool("global_pool", (4,), 3), Pool("reward_pool", (2,), 3)], nodes, ROLES) == []


def test_a_pool_whose_role_has_no_pod_is_named_with_what_is_missing() -> None:
    nodes = [_node("head", None, 0, 8), _node("a", "actor", 4)]
    (problem,) = unplaceable([Pool("global_pool", (4,), 3), Pool("reward_pool", (2,), 3)], nodes, ROLES)
    assert problem.startswith("pool reward_pool (reward), placement group 0: no Ray node offers CPU=6, GPU=2, "
                              "grpo.dev/reward=2 at once")


def test_a_pod_with_too_few_cpus_for_its_gpus_cannot_hold_the_pool() -> None:
    # verl asks for 3 CPUs with every GPU: 4 GPUs on a pod of 8 CPUs cannot be placed
    assert unplaceable([Pool("global_pool", (4,), 3)], [_node("a", "actor", 4, cpus=8)], ROLES)


def test_two_pools_of_one_role_cannot_both_take_the_same_gpus() -> None:
    pools = [Pool("rollout_pool_0", (2,), 2), Pool("rollout_pool_1", (2,), 2)]
    assert unplaceable(pools, [_node("r", "rollout", 2)], ROLES)
    assert not unplaceable(pools, [_node("r", "rollout", 4)], ROLES)
