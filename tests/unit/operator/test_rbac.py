"""The trainer's ServiceAccount, Role and RoleBinding."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_trainer_rbac
from grpojob_fixtures import plan_of, spec_with


def test_trainer_may_only_get_and_patch_its_own_grpojob_status(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    sa, role, binding = render_trainer_rbac(*colocated)
    assert (sa["kind"], sa["metadata"]["name"]) == ("ServiceAccount", "qwen2-7b-length-trainer")
    assert role["kind"] == "Role"
    status_rule = next(r for r in role["rules"] if r["resources"] == ["grpojobs/status"])
    assert status_rule == {
        "apiGroups": ["grpo.dev"],
        "resources": ["grpojobs/status"],
        "resourceNames": ["qwen2-7b-length"],
        "verbs": ["get", "patch"],
    }
    for rule in role["rules"]:
        assert rule["resourceNames"] == ["qwen2-7b-length"]
        assert set(rule["verbs"]) <= {"get", "patch"}
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "qwen2-7b-length-trainer", "namespace": "team-a"}]


def test_user_service_account_is_bound_not_created(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(serviceAccountName="team-sa"))
    objects = render_trainer_rbac(spec, plan_of(spec))
    assert [o["kind"] for o in objects] == ["Role", "RoleBinding"]
    assert objects[1]["subjects"][0]["name"] == "team-sa"
