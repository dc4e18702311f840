"""The lean diff-base storage must give kopf exactly the essence its own storage gives: a difference
would make kopf see spec changes that did not happen, or miss ones that did."""

from __future__ import annotations

import copy
import json
from typing import Any

import kopf
import pytest
from grpo_operator.diffbase import LeanAnnotationsDiffBaseStorage, lean_body
from grpojob_fixtures import example_body

PREFIX, KEY = "grpo.dev", "last-handled-configuration"


def stored_body(example: str) -> dict[str, Any]:
    """An example as the apiserver returns it mid-run: status, managedFields, kopf's annotations."""
    body = example_body(example)
    body["metadata"].update(
        {
            "namespace": "team-a",
            "uid": "0f1e",
            "generation": 3,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "labels": {"team": "a"},
            "annotations": {
                f"{PREFIX}/{KEY}": json.dumps({"spec": body["spec"]}),
                "other.example.com/note": "kept",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            "ownerReferences": [{"kind": "Workload", "name": "w", "uid": "1", "apiVersion": "kueue.x-k8s.io/v1"}],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}] * 5,
        }
    )
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "restarts": 1}
    return body


@pytest.mark.parametrize("example", ["reference-disaggregated", "colocated-length"])
def test_lean_essence_equals_kopfs_essence(example: str) -> None:
    raw = stored_body(example)
    ours = LeanAnnotationsDiffBaseStorage(prefix=PREFIX, key=KEY)
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key=KEY)
    assert ours.build(body=kopf.Body(copy.deepcopy(raw))) == kopfs.build(body=kopf.Body(copy.deepcopy(raw)))


def test_lean_essence_still_sees_a_spec_edit() -> None:
    storage = LeanAnnotationsDiffBaseStorage(prefix=PREFIX, key=KEY)
    before = stored_body("colocated-length")
    after = copy.deepcopy(before)
    after["spec"]["image"] = "grpo-trainer:edited"
    assert storage.build(body=kopf.Body(before)) != storage.build(body=kopf.Body(after))


def test_lean_body_leaves_status_and_managed_fields_behind() -> None:
    lean = lean_body(kopf.Body(stored_body("colocated-length")))
    assert "status" not in lean
    assert set(lean["metadata"]) == {"labels", "annotations", "ownerReferences", "name", "namespace"}


def test_status_fields_asked_for_take_kopfs_own_path() -> None:
    raw = stored_body("colocated-length")
    ours = LeanAnnotationsDiffBaseStorage(prefix=PREFIX, key=KEY)
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key=KEY)
    extra = [("status", "phase")]
    assert ours.build(body=kopf.Body(raw), extra_fields=extra) == kopfs.build(body=kopf.Body(raw), extra_fields=extra)
    assert ours.build(body=kopf.Body(raw), extra_fields=extra)["status"]["phase"] == "Running"
