"""Which children a job gets, who owns them, and what must exist before any is created."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJob
from grpo_operator.reconcile.children import creation_waves, missing_dependencies, training_children
from grpo_operator.render import NetworkPeers
from grpojob_fixtures import plan_of


def _job(body: dict[str, Any], **spec_changes: Any) -> GRPOJob:
    body = {**body, "spec": {**body["spec"], **spec_changes}}
    return GRPOJob.model_validate(body)


def test_retained_checkpoint_pvc_is_not_owned_so_deleting_the_job_keeps_weights(reference_body) -> None:
    job = _job(reference_body)
    children = training_children(job.spec, plan_of(job.spec, job.metadata["name"]), NetworkPeers())
    kinds = [c.kind for c in children]
    assert kinds[-1] == "RayJob"
    pvc = next(c for c in children if c.kind == "PersistentVolumeClaim")
    assert pvc.owned is False
    assert all(c.owned for c in children if c.kind != "PersistentVolumeClaim")


def test_delete_policy_delete_makes_the_pvc_owned(reference_body) -> None:
    checkpoints = {**reference_body["spec"]["checkpoints"], "deletePolicy": "Delete"}
    job = _job(reference_body, checkpoints=checkpoints)
    pvc = next(c for c in training_children(job.spec, plan_of(job.spec, "j"), None)
               if c.kind == "PersistentVolumeClaim")
    assert pvc.owned is True


def test_missing_claims_are_named_with_their_field(reference_body) -> None:
    job = _job(reference_body)
    problems = missing_dependencies(job.spec, plan_of(job.spec, "j"), claims={"models", "exports"}, configmaps={})
    assert [(p[0], p[1]) for p in problems] == [("data.claimName", "MissingPersistentVolumeClaim")]
    assert "'datasets'" in problems[0][2]


def test_reward_function_configmap_and_key_are_checked(colocated_body) -> None:
    reward = {"type": "function", "function": {"configMapName": "my-reward", "key": "reward.py",
                                               "name": "compute_score"}}
    job = _job(colocated_body, reward=reward)
    job_plan = plan_of(job.spec, "j")
    claims = {"models", "datasets"}
    absent = missing_dependencies(job.spec, job_plan, claims, {"my-reward": None})
    assert [p[1] for p in absent] == ["MissingConfigMap"]
    assert "kubectl create configmap my-reward --from-file=reward.py" in absent[0][2]
    wrong_key = missing_dependencies(job.spec, job_plan, claims, {"my-reward": {"score.py"}})
    assert [p[1] for p in wrong_key] == ["MissingConfigMapKey"]
    assert missing_dependencies(job.spec, job_plan, claims, {"my-reward": {"reward.py"}}) == []


def test_the_rolebinding_waits_for_its_role_and_the_rayjob_for_the_service_account(reference_body) -> None:
    job = _job(reference_body)
    first, second = creation_waves(training_children(job.spec, plan_of(job.spec, "j"), NetworkPeers()))
    assert {"ServiceAccount", "Role", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy"} <= {c.kind for c in first}
    assert sorted(c.kind for c in second) == ["RayJob", "RoleBinding"]
