"""GRPORuntime and pod overrides on the session's cluster: what a job that cannot take its runtime, or whose overrides
its namespace's Pod Security level refuses, is told, that nothing is created meanwhile, and that it starts by itself
once the cluster is put right. (The merge and the queue, on Kueue, are tests/e2e/cloud/test_runtimes.py's.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.components import KUBERNETES_VERSION
from grpo_devcluster.kubeapi import ApiError

from .example_runs import COLOCATED
from .grpojobs import apply_job, condition, example, set_ray_outcome, wait_phase
from .helm import CHART, helm
from .kube import create_namespace, delete_namespace, get, items, wait_for, wait_object

ENFORCE = "pod-security.kubernetes.io/enforce"


def _children(cluster: LocalCluster, namespace: str) -> list[str]:
    found = [f"Job/{j['metadata']['name']}" for j in items(cluster, "jobs", "-n", namespace)]
    found += [f"RayJob/{r['metadata']['name']}" for r in items(cluster, "rayjobs", "-n", namespace)]
    return found + [f"Pod/{p['metadata']['name']}" for p in items(cluster, "pods", "-n", namespace)]


def _ready_reason(reason: str):
    def check(job: dict | None) -> dict | None:
        conditions = ((job or {}).get("status") or {}).get("conditions") or []
        return job if any(c["type"] == "Ready" and c.get("reason") == reason for c in conditions) else None
    return check


@pytest.fixture
def late_runtime(cluster: LocalCluster) -> Iterator[str]:
    yield "team-defaults"
    cluster.api.delete("grporuntimes", "team-defaults")


def test_a_job_naming_a_runtime_that_does_not_exist_waits_and_starts_once_it_is_created(
        cluster: LocalCluster, team_ns: str, late_runtime: str) -> None:
    set_ray_outcome(cluster, team_ns, COLOCATED, "SUCCEEDED", "done")
    apply_job(cluster, team_ns, example("colocated-length", runtime=late_runtime))
    job = wait_object(cluster, "grpojobs", COLOCATED, team_ns, _ready_reason("RuntimeNotFound"), 60,
                      "Ready saying RuntimeNotFound")
    message = condition(job, "Ready")["message"]
    assert f"spec.runtime: no GRPORuntime named '{late_runtime}' exists" in message
    assert job["status"]["phase"] == "Invalid" and _children(cluster, team_ns) == []
    cluster.apply({"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORuntime", "metadata": {"name": late_runtime},
                   "spec": {"env": [{"name": "TEAM", "value": "a"}]}})
    wait_phase(cluster, team_ns, COLOCATED, "Succeeded", 120)
    done = get(cluster, "grpojob", COLOCATED, "-n", team_ns)
    assert done["status"]["runtime"]["fromRuntime"] == ["env"]


def test_an_override_the_namespaces_pod_security_level_refuses_is_said_before_anything_is_created(
        cluster: LocalCluster, team_ns: str) -> None:
    cluster.api.patch("namespaces", team_ns, None, {"metadata": {"labels": {ENFORCE: "baseline"}}})
    set_ray_outcome(cluster, team_ns, COLOCATED, "SUCCEEDED", "done")
    cache = {"name": "model-cache", "mountPath": "/cache", "hostPath": {"path": "/mnt/models"}}
    apply_job(cluster, team_ns, example("colocated-length", pods={"actor": {"volumes": [cache]}}))
    job = wait_object(cluster, "grpojobs", COLOCATED, team_ns, _ready_reason("PodSecurity"), 60,
                      "Ready saying PodSecurity")
    message = condition(job, "Ready")["message"]
    assert "spec.pods.actor.volumes[model-cache].hostPath" in message and f"({ENFORCE}=baseline)" in message
    assert f"kubectl label namespace {team_ns} --overwrite {ENFORCE}=privileged" in message
    assert _children(cluster, team_ns) == []  # no preflight, no RayJob, no pod refused one by one
    cluster.api.patch("namespaces", team_ns, None, {"metadata": {"labels": {ENFORCE: "privileged"}}})
    wait_phase(cluster, team_ns, COLOCATED, "Succeeded", 120)
    (rayjob,) = items(cluster, "rayjobs", "-n", team_ns)
    actor = next(g for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"] if g["groupName"] == "actor")
    assert {"name": "model-cache", "hostPath": {"path": "/mnt/models"}} in actor["template"]["spec"]["volumes"]


@pytest.fixture(scope="module")
def pod_security_policy(cluster: LocalCluster) -> Iterator[list[dict]]:
    """The chart's ValidatingAdmissionPolicy and its binding (templates/admission-policy.yaml), as `helm install`
    renders them on a cluster that serves the API, applied to the session's cluster for this module."""
    # A release name of its own: the chart's installs later in the session (the real node's) make their own.
    rendered = helm(cluster, "template", "policy-test", str(CHART), "--namespace", "grpo-system",
                    "--kube-version", KUBERNETES_VERSION, "--api-versions",
                    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
                    "--show-only", "templates/admission-policy.yaml").stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    cluster.apply(objects)
    probe = create_namespace(cluster, "pod-security-probe")
    cluster.api.patch("namespaces", probe, None, {"metadata": {"labels": {ENFORCE: "baseline"}}})

    def enforced() -> bool:  # the apiserver loads a new policy within a few seconds, not at once
        try:
            _dry_run(cluster, probe, pods={"actor": {"hostNetwork": True}})
        except ApiError:
            return True
        return False

    wait_for("the admission policy in force", enforced, timeout=60, interval=0.5)
    yield objects
    delete_namespace(cluster, probe)
    plurals = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
               "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
    for obj in objects:
        cluster.api.delete(plurals[obj["kind"]], obj["metadata"]["name"], missing_ok=False)


def _dry_run(cluster: LocalCluster, namespace: str, **spec: object) -> None:
    body = example("colocated-length", **spec)
    cluster.api.create({**body, "metadata": {**body["metadata"], "namespace": namespace}}, dry_run=True)


@pytest.mark.parametrize(("level", "spec", "refusal"), [
    ("baseline", {"pods": {"actor": {"hostNetwork": True}}}, "pod-security.kubernetes.io/enforce=privileged"),
    ("baseline", {"pods": {"converter": {"volumes": [{"name": "cache", "mountPath": "/cache",
                                                      "hostPath": {"path": "/mnt/cache"}}]}}},
     "spec.pods hostNetwork or hostPath volumes cannot run"),
    ("restricted", {"pods": {"head": {"capabilities": ["CHOWN"]}}},
     "--overwrite pod-security.kubernetes.io/enforce=baseline"),
    ("baseline", {"pods": {"actor": {"capabilities": ["IPC_LOCK"]}}}, "pod-security.kubernetes.io/enforce=privileged"),
    ("restricted", {"pods": {"actor": {"capabilities": ["NET_BIND_SERVICE"]}}},
     "--overwrite pod-security.kubernetes.io/enforce=baseline"),  # comes with allowPrivilegeEscalation
    ("baseline", {"pods": {"head": {"capabilities": ["CHOWN"]}}}, None),
    ("privileged", {"pods": {"actor": {"capabilities": ["IPC_LOCK"]}}}, None),
    ("restricted", {"network": {"mode": "rdma"}}, None),  # no capability added: nothing to refuse
])
def test_overrides_the_namespace_refuses_are_refused_at_kubectl_apply_naming_the_label(
        cluster: LocalCluster, scratch_ns: str, pod_security_policy: list[dict], level: str, spec: dict,
        refusal: str | None) -> None:
    cluster.api.patch("namespaces", scratch_ns, None, {"metadata": {"labels": {ENFORCE: level}}})
    if refusal is None:
        _dry_run(cluster, scratch_ns, **spec)
        return
    with pytest.raises(ApiError) as refused:
        _dry_run(cluster, scratch_ns, **spec)
    assert refused.value.status in (400, 403, 422)
    assert f"cannot run in namespace {scratch_ns}: it enforces the {level} Pod Security Standard" in str(refused.value)
    assert refusal in str(refused.value)


def test_an_update_is_judged_again_only_when_it_changes_the_overrides(
        cluster: LocalCluster, team_ns: str, pod_security_policy: list[dict]) -> None:
    """The guardrails' suspend (and any edit that leaves spec.pods and spec.network alone) is not refused because the
    namespace's level was raised after the job was admitted; an edit of the overrides is judged again."""
    on_host = {"actor": {"hostNetwork": True}, "head": {"hostNetwork": True}}
    apply_job(cluster, team_ns, example("colocated-length", pods=on_host, scheduling={"suspend": True}))
    waiting = example("colocated-length", runtime="no-such-runtime")  # stays Invalid: its spec stays editable
    waiting["metadata"]["name"] = "waiting"
    apply_job(cluster, team_ns, waiting)
    wait_object(cluster, "grpojobs", "waiting", team_ns, _ready_reason("RuntimeNotFound"), 60, "RuntimeNotFound")
    cluster.api.patch("namespaces", team_ns, None, {"metadata": {"labels": {ENFORCE: "baseline"}}})
    cluster.api.patch("grpojobs", COLOCATED, team_ns, {"spec": {"scheduling": {"suspend": False}}})
    assert get(cluster, "grpojob", COLOCATED, "-n", team_ns)["spec"]["scheduling"]["suspend"] is False
    with pytest.raises(ApiError) as refused:
        cluster.api.patch("grpojobs", "waiting", team_ns, {"spec": {"pods": on_host}})
    assert "cannot run in namespace" in str(refused.value)
    assert f"{ENFORCE}=privileged" in str(refused.value)
