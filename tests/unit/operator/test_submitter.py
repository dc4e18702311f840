"""KubeRay's submitter pod, rendered explicitly: every setting of the job reaches it."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_rayjob
from grpojob_fixtures import IMAGE, plan_of, spec_with


def _submitter(spec: GRPOJobSpec, job_plan: Plan) -> dict[str, Any]:
    rayjob = render_rayjob(spec, job_plan)["spec"]
    assert rayjob["submissionMode"] == "K8sJobMode"
    return rayjob["submitterPodTemplate"]


def test_submitter_runs_the_trainer_image_small_and_without_a_command(reference: tuple[GRPOJobSpec, Plan]) -> None:
    template = _submitter(*reference)
    (container,) = template["spec"]["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == IMAGE
    # KubeRay fills in `ray job submit ... ; ray job logs --follow` only for a container without a command.
    assert "command" not in container and "args" not in container
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert template["spec"]["restartPolicy"] == "Never"
    assert template["spec"]["automountServiceAccountToken"] is False


def test_submitter_carries_pull_secrets_account_priority_placement_and_labels(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["imagePullSecrets"] = [{"name": "regcred"}]
        s["serviceAccountName"] = "team-sa"
        s["scheduling"] = {"priorityClassName": "training"}
        s["podMetadata"] = {"labels": {"team": "research"}, "annotations": {"cost-center": "42"}}
        s["placement"]["head"] = {
            "nodeSelector": {"grpo.dev/pool": "cpu"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "grpo", "effect": "NoSchedule"}],
        }

    spec = spec_with(colocated_body, edit)
    template = _submitter(spec, plan_of(spec, "qwen2-7b-length"))
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "team-sa"
    assert pod["priorityClassName"] == "training"
    assert pod["nodeSelector"] == {"grpo.dev/pool": "cpu"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "grpo", "effect": "NoSchedule"}]
    labels = template["metadata"]["labels"]
    assert labels["grpo.dev/job"] == "qwen2-7b-length"
    assert labels["app.kubernetes.io/component"] == "submitter"
    assert labels["team"] == "research"
    assert template["metadata"]["annotations"] == {"cost-center": "42"}


def test_submitter_uses_the_operator_created_account_by_default(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    assert _submitter(*colocated)["spec"]["serviceAccountName"] == "qwen2-7b-length-trainer"
