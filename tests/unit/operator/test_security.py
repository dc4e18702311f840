"""Every pod a GRPOJob gets meets the "restricted" Pod Security Standard (the e2e proves admission)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_export_job, render_rayjob
from grpo_operator.render.security import TRAINER_UID

# The volume types the restricted profile allows (Kubernetes Pod Security Standards).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _pods(spec: GRPOJobSpec, job_plan: Plan) -> Iterator[tuple[str, dict[str, Any]]]:
    rayjob = render_rayjob(spec, job_plan)["spec"]
    yield "head", rayjob["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    for group in rayjob["rayClusterSpec"]["workerGroupSpecs"]:
        yield group["groupName"], group["template"]["spec"]
    yield "submitter", rayjob["submitterPodTemplate"]["spec"]
    if spec.export.enabled:
        yield "converter", render_export_job(spec, job_plan)["spec"]["template"]["spec"]


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the apiserver's PodSecurity admission (restricted, latest) would refuse in this pod spec."""
    problems: list[str] = []
    pod_ctx = pod.get("securityContext") or {}
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        problems.append("host namespaces")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']} of type {kinds}")
    for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            problems.append(f"{container['name']}: privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{container['name']}: allowPrivilegeEscalation != false")
        if "ALL" not in (ctx.get("capabilities") or {}).get("drop", []):
            problems.append(f"{container['name']}: capabilities not dropped")
        if set((ctx.get("capabilities") or {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{container['name']}: capabilities added")
        if ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is not True:
            problems.append(f"{container['name']}: runAsNonRoot != true")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{container['name']}: runAsUser 0")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{container['name']}: seccompProfile {seccomp}")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            problems.append(f"{container['name']}: hostPort")
    return problems


@pytest.mark.parametrize("example", ["reference", "colocated"])
def test_every_pod_of_the_examples_is_restricted(example: str, request: pytest.FixtureRequest) -> None:
    spec, job_plan = request.getfixturevalue(example)
    pods = dict(_pods(spec, job_plan))
    assert {"head", "actor", "submitter"} <= set(pods)
    for name, pod in pods.items():
        assert restricted_violations(pod) == [], name


def test_pods_run_as_the_trainer_user_with_a_writable_volume_root(reference: tuple[GRPOJobSpec, Plan]) -> None:
    for name, pod in _pods(*reference):
        ctx = pod["securityContext"]
        assert (ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"]) == (TRAINER_UID, 1000, 1000), name
        # Ownership is fixed once, not by walking hundreds of GB of checkpoints at every start.
        assert ctx["fsGroupChangePolicy"] == "OnRootMismatch", name


def test_the_checker_refuses_what_restricted_refuses() -> None:
    plain = {"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    problems = restricted_violations(plain)
    assert any("allowPrivilegeEscalation" in p for p in problems)
    assert any("hostPath" in p for p in problems)
    assert any("seccompProfile" in p for p in problems)
