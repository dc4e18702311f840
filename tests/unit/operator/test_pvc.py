"""The checkpoint PVC <job>-checkpoints."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_checkpoint_pvc
from grpojob_fixtures import plan_of, spec_with


def test_new_checkpoint_pvc_is_rwx_with_the_requested_size(reference: tuple[GRPOJobSpec, Plan]) -> None:
    pvc = render_checkpoint_pvc(*reference)
    assert pvc is not None
    assert pvc["metadata"]["name"] == "qwen2-7b-reference-checkpoints"
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "500Gi"}}}
    assert pvc["metadata"]["annotations"] == {"grpo.dev/delete-policy": "Retain"}
    assert "ownerReferences" not in pvc["metadata"]


def test_storage_class_access_modes_and_delete_policy_pass_through(colocated_body: dict[str, Any]) -> None:
    volume = {"size": "1Ti", "storageClassName": "fast", "accessModes": ["ReadWriteOnce"]}
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": volume, "deletePolicy": "Delete"}))
    pvc = render_checkpoint_pvc(spec, plan_of(spec))
    assert pvc is not None
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["metadata"]["annotations"]["grpo.dev/delete-policy"] == "Delete"


def test_no_pvc_when_the_user_names_an_existing_claim(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": {"claimName": "mine"}}))
    assert render_checkpoint_pvc(spec, plan_of(spec)) is None
