"""The ConfigMap <job>-verl."""

from __future__ import annotations

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_configmap, render_verl_config
from grpojob_fixtures import NAMESPACE


def test_configmap_holds_verl_yaml_and_is_immutable(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    cm = render_configmap(*colocated)
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert cm["metadata"]["name"] == "qwen2-7b-length-verl"
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["data"] == {"verl.yaml": render_verl_config(*colocated)}
    assert cm["immutable"] is True


def test_children_are_labelled_but_not_owned(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    meta = render_configmap(*colocated)["metadata"]
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "grpo-operator"
    assert meta["labels"]["grpo.dev/job"] == "qwen2-7b-length"
    # The handlers adopt children (kopf.adopt); a render function never sets owners.
    assert "ownerReferences" not in meta
