"""How the operator reads nodes as kube-scheduler does: required node affinity terms and the GPU rules."""

from __future__ import annotations

from grpo_operator.node_rules import driver_terms, floor_of, matches_terms, pool_of, with_gpu_toleration


def test_the_driver_terms_admit_a_new_driver_or_no_label_and_refuse_an_old_one() -> None:
    terms = driver_terms(580)
    assert matches_terms({"nvidia.com/cuda.driver.major": "580"}, terms)
    assert matches_terms({"nvidia.com/cuda.driver.major": "590"}, terms)
    assert matches_terms({}, terms)  # no GPU Feature Discovery: not refused (the operator warns instead)
    assert not matches_terms({"nvidia.com/cuda.driver.major": "535"}, terms)
    assert not matches_terms({"nvidia.com/cuda.driver.major": "garbage"}, terms)  # Gt needs an integer, as in k8s
    assert floor_of(terms) == 580 and floor_of(()) is None


def test_terms_are_ored_and_expressions_anded_as_the_scheduler_reads_them() -> None:
    terms = [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]},
                                   {"key": "b", "operator": "Exists"}]},
             {"matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["x"]},
                                   {"key": "d", "operator": "Lt", "values": ["5"]}]}]
    assert matches_terms({"a": "1", "b": ""}, terms)
    assert not matches_terms({"a": "1"}, terms)
    assert matches_terms({"d": "4"}, terms)
    assert not matches_terms({"c": "x", "d": "4"}, terms)
    assert matches_terms({"anything": "at all"}, ())


def test_the_gpu_toleration_is_added_once() -> None:
    added = with_gpu_toleration(())
    assert added == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert with_gpu_toleration(added) == added
    everything = ({"operator": "Exists"},)
    assert with_gpu_toleration(everything) == everything
    # Only GKE's value: EKS's nvidia.com/gpu=true would still block it, so ours is added beside it.
    gke_only = ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},)
    assert len(with_gpu_toleration(gke_only)) == 2


def test_a_pool_is_named_by_the_label_its_cloud_gives_it() -> None:
    assert pool_of("n", {"cloud.google.com/gke-nodepool": "h100"}) == "cloud.google.com/gke-nodepool=h100"
    assert pool_of("n", {"karpenter.sh/nodepool": "gpu"}) == "karpenter.sh/nodepool=gpu"
    assert pool_of("n", {}) == "n"
