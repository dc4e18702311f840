"""Can a role's pool hold its pods at all (from allocatable, not usage), and how much memory its GPUs have."""

from __future__ import annotations

from typing import Any

from grpo_operator.node_rules import tolerates
from grpo_operator.reconcile.capacity import (
    GPU_MEMORY_LABEL,
    NodeView,
    capacity_shortfalls,
    gpu_memory_by_role,
    selector_string,
    unchecked_driver_pools,
)
from grpojob_fixtures import example_body, pinned_to_pools, plan_of, spec_with


def node(name: str, pool: str, gpus: int = 8, cpu: str = "96", memory: str = "1Ti", taints: list | None = None,
         gpu_memory_mib: str | None = "81920", driver: str | None = "580") -> NodeView:
    labels = {"grpo.dev/pool": pool, **({GPU_MEMORY_LABEL: gpu_memory_mib} if gpu_memory_mib else {}),
              **({"nvidia.com/cuda.driver.major": driver} if driver else {})}
    return NodeView.of({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}},
    })


DEVCLUSTER = [node("t0", "train"), node("t1", "train"), node("r0", "rollout"), node("r1", "rollout")]


def _reference(edit: Any = None) -> Any:
    """The reference example with each role pinned to the devcluster pool it used to name."""
    def pinned_then(raw: dict[str, Any]) -> None:
        pinned_to_pools(raw)
        if edit is not None:
            edit(raw)
    return plan_of(spec_with(example_body("reference-disaggregated"), pinned_then))


def test_the_examples_fit_the_devclusters_pools() -> None:
    assert capacity_shortfalls(_reference(), DEVCLUSTER) == []
    assert capacity_shortfalls(plan_of(spec_with(example_body("reference-disaggregated"))), DEVCLUSTER) == []
    assert capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), DEVCLUSTER) == []


def test_a_pool_with_no_node_is_named() -> None:
    plan = _reference(lambda s: s["placement"]["roles"]["rollout"].update(nodeSelector={"grpo.dev/pool": "h200"}))
    (shortfall,) = capacity_shortfalls(plan, DEVCLUSTER)
    assert shortfall.field == "placement.roles.rollout" and shortfall.reason == "InsufficientCapacity"
    assert "no node matches the pool {grpo.dev/pool=h200}" in shortfall.message
    assert shortfall.message.startswith("spec.placement.roles.rollout: 1 pod(s) of 2 nvidia.com/gpu")


def test_nodes_too_small_for_one_pod_are_counted_and_the_largest_named() -> None:
    small = [node("t0", "train", gpus=4), node("t1", "train", gpus=4)]
    (shortfall,) = capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), small)
    assert shortfall.field == "placement.roles.actor"
    assert "2 node(s) holding 0 such pod(s) in all (the largest offers 4 nvidia.com/gpu" in shortfall.message


def test_replicas_need_enough_nodes_and_cpu_and_memory_count_too() -> None:
    plan = plan_of(spec_with(example_body("colocated-length"),
                             lambda s: s["placement"]["roles"]["actor"].update(replicas=4)))
    assert [s.field for s in capacity_shortfalls(plan, DEVCLUSTER[:2])] == ["placement.roles.actor"]
    starved = [node("t0", "train", cpu="16"), node("t1", "train", memory="64Gi")]
    assert capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), starved)


def test_two_pods_share_a_node_when_its_gpus_allow() -> None:
    plan = plan_of(spec_with(example_body("colocated-length"),
                             lambda s: s["placement"]["roles"]["actor"].update(gpus=4, replicas=4)))
    assert capacity_shortfalls(plan, DEVCLUSTER) == []


def test_taints_keep_a_role_off_unless_tolerated() -> None:
    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    tainted = [node("t0", "train", taints=[taint]), node("t1", "train", taints=[taint])]
    colocated = example_body("colocated-length")
    assert capacity_shortfalls(plan_of(spec_with(colocated)), tainted)
    tolerant = spec_with(colocated, lambda s: s["placement"]["roles"]["actor"].update(
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]))
    assert capacity_shortfalls(plan_of(tolerant), tainted) == []
    soft = [node("t0", "train", taints=[{**taint, "effect": "PreferNoSchedule"}])]
    assert capacity_shortfalls(plan_of(spec_with(colocated)), soft) == []


def test_the_gpu_taint_as_gke_sets_it_is_tolerated_by_gpu_roles_unasked() -> None:
    gke = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    eks = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    for taint in (gke, eks):
        tainted = [node("g0", "gpu", taints=[taint])]
        assert capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), tainted) == []


def test_a_pool_whose_driver_is_too_old_is_named_with_its_driver_and_the_floor() -> None:
    old = [NodeView.of({
        "metadata": {"name": "a100-b-0", "labels": {"cloud.google.com/gke-nodepool": "a100-pool",
                                                    "nvidia.com/cuda.driver.major": "535"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}},
    })]
    (shortfall,) = capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), old)
    assert shortfall.reason == "DriverTooOld" and shortfall.field == "placement.roles.actor"
    assert "older than 580" in shortfall.message
    assert "cloud.google.com/gke-nodepool=a100-pool (driver 535)" in shortfall.message
    # With a good node beside it the old one is only avoided; too small a pool even with it is the usual shortfall.
    assert capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), [*old, node("g", "x")]) == []
    small_old = [node("s", "x", gpus=4, driver="535")]
    (small,) = capacity_shortfalls(plan_of(spec_with(example_body("colocated-length"))), small_old)
    assert small.reason == "InsufficientCapacity"


def test_gpu_nodes_without_a_driver_label_are_warned_about_not_refused() -> None:
    plan = plan_of(spec_with(example_body("colocated-length")))
    unlabeled = [node("u0", "x", driver=None), node("u1", "x", driver=None)]
    assert capacity_shortfalls(plan, unlabeled) == []
    assert unchecked_driver_pools(plan, unlabeled) == ["u0", "u1"]
    assert unchecked_driver_pools(plan, DEVCLUSTER) == []


def test_toleration_matching_follows_kubernetes() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "k", "value": "v"}], taint)  # Equal is the default operator
    assert not tolerates([{"key": "k", "value": "w"}], taint)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}], taint)
    assert not tolerates([{"value": "v"}], taint)  # an empty key needs Exists


def test_gpu_memory_is_the_smallest_label_of_the_roles_nodes_unless_placement_says() -> None:
    mixed = [node("t0", "train", gpu_memory_mib="81920"), node("t1", "train", gpu_memory_mib="40960"),
             node("r0", "rollout", gpu_memory_mib="143771"), node("r1", "rollout", gpu_memory_mib=None)]
    plan = _reference()
    assert gpu_memory_by_role(plan, mixed, None) == {"actor": 40960 * 2**20, "rollout": 143771 * 2**20,
                                                     "reward": 143771 * 2**20}
    assert gpu_memory_by_role(plan, mixed, 80 * 2**30) == {"actor": 80 * 2**30, "rollout": 80 * 2**30,
                                                           "reward": 80 * 2**30}
    assert gpu_memory_by_role(plan, [node("t0", "train", gpu_memory_mib=None)], None) == {}


def test_selector_string_is_the_apis_label_selector() -> None:
    assert selector_string({"b": "2", "a": "1"}) == "a=1,b=2"
    assert selector_string({}) == ""
