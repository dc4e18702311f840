"""The checkpoint PVC <job>-checkpoints: access modes decided from who writes checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, PlanError, with_checkpoint_claim, with_checkpoint_size
from grpo_operator.render import render_checkpoint_pvc
from grpojob_fixtures import plan_of, spec_with


def test_one_actor_pod_gets_a_block_storage_claim(reference: tuple[GRPOJobSpec, Plan]) -> None:
    pvc = render_checkpoint_pvc(*reference)
    assert pvc is not None
    assert pvc["metadata"]["name"] == "qwen2-7b-reference-checkpoints"
    # The head and the single actor pod share its node, so ReadWriteOnce (EBS, PD, Azure Disk) binds.
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "500Gi"}}}
    assert reference[1].writers_share_node is True
    assert pvc["metadata"]["annotations"] == {"grpo.dev/delete-policy": "Retain"}
    assert "ownerReferences" not in pvc["metadata"]


def test_a_claim_without_a_size_gets_the_preflights_choice_else_the_default(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body)
    assert spec.checkpoints.volume.size is None  # the example names no size
    default = render_checkpoint_pvc(spec, plan_of(spec))
    sized = render_checkpoint_pvc(spec, with_checkpoint_size(plan_of(spec), "375Gi"))
    assert default is not None and default["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert sized is not None and sized["spec"]["resources"]["requests"]["storage"] == "375Gi"
    named = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": {"size": "1Ti"}}))
    kept = render_checkpoint_pvc(named, with_checkpoint_size(plan_of(named), "375Gi"))
    assert kept is not None and kept["spec"]["resources"]["requests"]["storage"] == "1Ti"  # the user's size wins


def test_several_actor_pods_need_a_shared_filesystem(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s["placement"]["roles"]["actor"].update(replicas=2))
    job_plan = plan_of(spec)
    pvc = render_checkpoint_pvc(spec, job_plan)
    assert pvc is not None and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert job_plan.writers_share_node is False


def test_read_write_once_with_several_actor_pods_is_refused_naming_the_fix(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["placement"]["roles"]["actor"]["replicas"] = 2
        s["checkpoints"] = {"volume": {"size": "1Ti", "accessModes": ["ReadWriteOnce"]}}

    with pytest.raises(PlanError) as refused:
        plan_of(spec_with(colocated_body, edit))
    assert refused.value.field == "checkpoints.volume.accessModes"
    assert "ReadWriteMany" in refused.value.message and "2 actor pods" in refused.value.message


def test_storage_class_access_modes_and_delete_policy_pass_through(colocated_body: dict[str, Any]) -> None:
    volume = {"size": "1Ti", "storageClassName": "fast", "accessModes": ["ReadWriteMany"]}
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": volume, "deletePolicy": "Delete"}))
    job_plan = plan_of(spec)
    pvc = render_checkpoint_pvc(spec, job_plan)
    assert pvc is not None
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["metadata"]["annotations"]["grpo.dev/delete-policy"] == "Delete"
    assert job_plan.writers_share_node is False  # a shared filesystem: the head goes where it likes


def test_no_pvc_when_the_user_names_an_existing_claim(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": {"claimName": "mine"}}))
    assert render_checkpoint_pvc(spec, plan_of(spec)) is None


@pytest.mark.parametrize(("modes", "replicas", "share"), [
    (["ReadWriteOnce"], 1, True),
    (["ReadWriteMany"], 1, False),
    (["ReadWriteOnce", "ReadWriteMany"], 2, False),
])
def test_an_existing_claims_access_modes_decide_where_the_writers_run(
        colocated_body: dict[str, Any], modes: list[str], replicas: int, share: bool) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["checkpoints"] = {"volume": {"claimName": "team-ckpt"}}
        s["placement"]["roles"]["actor"]["replicas"] = replicas

    assert with_checkpoint_claim(plan_of(spec_with(colocated_body, edit)), modes).writers_share_node is share


@pytest.mark.parametrize("modes", [["ReadWriteOnce"], ["ReadWriteOncePod"]])
def test_an_existing_claim_the_writers_cannot_share_is_refused(colocated_body: dict[str, Any],
                                                                modes: list[str]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["checkpoints"] = {"volume": {"claimName": "team-ckpt"}}
        s["placement"]["roles"]["actor"]["replicas"] = 2

    with pytest.raises(PlanError) as refused:
        with_checkpoint_claim(plan_of(spec_with(colocated_body, edit)), modes)
    assert refused.value.field == "checkpoints.volume.claimName"
    assert "'team-ckpt'" in refused.value.message
