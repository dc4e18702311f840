"""Whether an autoscaler may add the nodes a role lacks: Karpenter's NodePools read as Karpenter would use them."""

from __future__ import annotations

from typing import Any

from grpo_operator.reconcile.autoscaling import NodePoolView, autoscalers_for, may_provide
from grpojob_fixtures import example_body, plan_of, spec_with

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _pool(labels: dict | None = None, requirements: list | None = None, taints: list | None = None,
          gpus: str | None = "16") -> NodePoolView:
    spec: dict[str, Any] = {"template": {"metadata": {"labels": labels or {}},
                                         "spec": {"requirements": requirements or [], "taints": taints or []}}}
    if gpus is not None:
        spec["limits"] = {"nvidia.com/gpu": gpus}
    return NodePoolView.of({"metadata": {"name": "gpu"}, "spec": spec})


def _actor(edit: Any = None) -> Any:
    return plan_of(spec_with(example_body("colocated-length"), edit)).actor


def test_a_gpu_pool_with_room_and_the_gpu_taint_may_provide_the_actor() -> None:
    assert may_provide(_pool(taints=[GPU_TAINT]), _actor())
    assert autoscalers_for(_actor(), [_pool(taints=[GPU_TAINT])], "auto") == ["Karpenter NodePool gpu"]


def test_limits_taints_and_labels_the_pool_cannot_meet_rule_it_out() -> None:
    assert not may_provide(_pool(gpus="4"), _actor())  # 8 GPUs asked, 4 allowed
    assert not may_provide(_pool(taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]), _actor())
    pinned = _actor(lambda s: s["placement"]["roles"]["actor"].update(nodeSelector={"team": "a"}))
    assert not may_provide(_pool(), pinned)  # a label of the user's that the pool does not put on its nodes
    assert may_provide(_pool(labels={"team": "a"}), pinned)
    assert may_provide(_pool(requirements=[{"key": "team", "operator": "In", "values": ["a", "b"]}]), pinned)
    assert not may_provide(_pool(labels={"nvidia.com/cuda.driver.major": "535"}), _actor())  # below the floor


def test_labels_the_instance_decides_are_left_to_the_pools_instance_types() -> None:
    zonal = _actor(lambda s: s["placement"]["roles"]["actor"].update(
        nodeSelector={"topology.kubernetes.io/zone": "us-central1-c", "nvidia.com/gpu.product": "H100"}))
    assert may_provide(_pool(), zonal)
    assert not may_provide(_pool(requirements=[{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                "values": ["us-central1-a"]}]), zonal)


def test_the_modes_other_than_auto_read_no_nodepool() -> None:
    assert autoscalers_for(_actor(), [_pool()], "never") == []
    assert autoscalers_for(_actor(), [], "always") == ["the cluster's autoscaler (operator setting autoscaling=always)"]
