"""The GRPORuntime examples (examples/runtimes/) and the GRPOJobs written for them: each runtime is a valid
GRPORuntime, each job a valid GRPOJob naming one of them, and each job's effective spec under its runtime
(what the operator plans and renders from) plans and renders what the examples' comments say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api import GRPOJob, GRPOJobSpec, GRPORuntime
from grpo_operator.plan import Plan, plan
from grpo_operator.render import render_checkpoint_pvc, render_export_job, render_preflight_job, render_rayjob
from grpo_operator.render.common import KUEUE_QUEUE_LABEL
from grpo_operator.runtimes import Sources, apply_runtime
from grpojob_fixtures import EXAMPLES, NAMESPACE
from test_security import restricted_violations

RUNTIME_EXAMPLES = EXAMPLES / "runtimes"
# Each job example and the runtime example it names.
JOBS = {"grpojob-on-gke-runtime": "runtime-gke-h100", "grpojob-on-eks-efa": "runtime-eks-efa"}
GPU_ROLES = ("actor", "rollout", "reward")


def _body(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _effective(job_name: str) -> tuple[GRPOJobSpec, Sources, Plan]:
    """The job example's spec under its runtime example, as the operator takes it (runtimes.apply_runtime)."""
    job = GRPOJob.model_validate(_body(RUNTIME_EXAMPLES / f"{job_name}.yaml"))
    runtime = GRPORuntime.model_validate(_body(RUNTIME_EXAMPLES / f"{JOBS[job_name]}.yaml"))
    spec, sources = apply_runtime(job.spec, runtime.spec)
    # No default image: every image in these pods must be the runtime's.
    return spec, sources, plan(spec, name=job.metadata["name"], namespace=NAMESPACE, default_image=None)


def _pods(spec: GRPOJobSpec, job_plan: Plan) -> dict[str, dict[str, Any]]:
    """Pod templates by role: the Ray head and worker groups, the preflight and the converter."""
    cluster = render_rayjob(spec, job_plan)["spec"]["rayClusterSpec"]
    pods = {group["groupName"]: group["template"] for group in cluster["workerGroupSpecs"]}
    pods["head"] = cluster["headGroupSpec"]["template"]
    pods["preflight"] = render_preflight_job(spec, job_plan, {})["spec"]["template"]
    if spec.export.enabled:
        pods["converter"] = render_export_job(spec, job_plan)["spec"]["template"]
    return pods


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def _limits(pod: dict[str, Any]) -> dict[str, str]:
    return pod["spec"]["containers"][0]["resources"]["limits"]


def _required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return affinity["nodeSelectorTerms"]


def test_the_runtime_examples_are_grpo_runtimes_and_the_job_examples_name_them() -> None:
    kinds = {path.stem: _body(path)["kind"] for path in RUNTIME_EXAMPLES.glob("*.yaml")}
    assert {name for name, kind in kinds.items() if kind == "GRPORuntime"} == set(JOBS.values())
    assert {name for name, kind in kinds.items() if kind == "GRPOJob"} == set(JOBS)
    names = {}
    for runtime in JOBS.values():
        body = _body(RUNTIME_EXAMPLES / f"{runtime}.yaml")
        names[runtime] = GRPORuntime.model_validate(body).metadata["name"]
        assert "namespace" not in body["metadata"]  # cluster-scoped
    for job, runtime in JOBS.items():
        assert GRPOJob.model_validate(_body(RUNTIME_EXAMPLES / f"{job}.yaml")).spec.runtime == names[runtime]


def test_the_examples_hack_demo_applies_are_grpojobs_only() -> None:
    # hack/demo applies examples/*.yaml (not its subfolders) and waits for every GRPOJob to succeed on the local
    # cluster: a runtime there would be taken by every example job (the GKE one is the default).
    assert {_body(path)["kind"] for path in EXAMPLES.glob("*.yaml")} == {"GRPOJob"}


@pytest.mark.parametrize("job_name", JOBS)
def test_each_job_example_plans_under_its_runtime_and_every_pod_stays_restricted(job_name: str) -> None:
    spec, _, job_plan = _effective(job_name)
    runtime = GRPORuntime.model_validate(_body(RUNTIME_EXAMPLES / f"{JOBS[job_name]}.yaml")).spec
    pods = _pods(spec, job_plan)
    assert {"head", "actor", "preflight"} <= set(pods)
    for role, pod in pods.items():
        assert pod["spec"]["containers"][0]["image"] == runtime.image, role
        # tcp and efa add no capability, volume or host namespace: a restricted namespace admits every pod.
        assert restricted_violations(pod["spec"]) == [], role
    assert render_rayjob(spec, job_plan)["metadata"]["labels"][KUEUE_QUEUE_LABEL] == runtime.queue_name


def test_the_gke_job_takes_the_runtimes_pool_secret_and_network_and_keeps_its_own_storage_class() -> None:
    spec, sources, job_plan = _effective("grpojob-on-gke-runtime")
    assert sources.overridden == ["checkpoints.volume.storageClassName"]
    assert {"image", "imagePullSecrets", "scheduling.queueName", "network", "pods.actor"} <= set(sources.from_runtime)
    pvc = render_checkpoint_pvc(spec, job_plan)
    assert pvc is not None and pvc["spec"]["storageClassName"] == "premium-rwo"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]  # one actor pod: block storage serves
    pods = _pods(spec, job_plan)
    actor = pods["actor"]
    assert {"name": "registry-credentials"} in actor["spec"]["imagePullSecrets"]
    assert actor["metadata"]["labels"]["cost-center"] == "ml-research"
    env = _env(actor)
    assert (env["NCCL_IB_DISABLE"], env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("1", "eth0", "eth0")
    pool = {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h100-80gb"]}
    assert all(pool in term["matchExpressions"] for term in _required_terms(actor))
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in actor["spec"]["tolerations"]
    for role in ("head", "preflight"):
        assert "NCCL_SOCKET_IFNAME" not in _env(pods[role]), role


def test_the_eks_job_gets_efa_devices_and_huge_pages_on_every_gpu_pod_and_a_shared_checkpoint_claim() -> None:
    spec, sources, job_plan = _effective("grpojob-on-eks-efa")
    assert sources.overridden == []  # the runtime's shared class, not its gp3: the claim is ReadWriteMany
    assert "checkpoints.volume.storageClassName" in sources.from_runtime
    assert [(g.role, g.gpus, g.replicas) for g in job_plan.groups] == [("actor", 8, 2), ("rollout", 8, 1)]
    pvc = render_checkpoint_pvc(spec, job_plan)
    assert pvc is not None and pvc["spec"]["storageClassName"] == "efs-sc"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # two actor pods write checkpoints
    pods = _pods(spec, job_plan)
    instance = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}
    for role in ("actor", "rollout"):
        pod = pods[role]
        limits, requests = _limits(pod), pod["spec"]["containers"][0]["resources"]["requests"]
        assert (limits["vpc.amazonaws.com/efa"], limits["hugepages-2Mi"], limits["nvidia.com/gpu"]) == (
            "32", "5120Mi", "8"), role
        assert requests["vpc.amazonaws.com/efa"] == "32" and requests["hugepages-2Mi"] == "5120Mi", role
        assert (_env(pod)["FI_PROVIDER"], _env(pod)["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1"), role
        assert all(instance in term["matchExpressions"] for term in _required_terms(pod)), role
    for role in ("head", "preflight", "converter"):
        if role in pods:
            assert "vpc.amazonaws.com/efa" not in str(pods[role]) and "FI_PROVIDER" not in _env(pods[role]), role
