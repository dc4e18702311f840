"""An install on a cluster whose KubeRay is too old, and `helm test` on one that works.

This module starts its OWN local cluster: it edits the cluster-wide RayJob CRD (stripping the field
KubeRay v1.5.0 added) and runs operators of its own, which must not touch the session's cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.operator_runner import OperatorProcess, install_crd, prepare_job_namespace

from .grpojobs import apply_job, condition, example, wait_phase
from .kube import create_namespace, get, items, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "grpo-operator"
JOB = "qwen2-7b-length"
WORKER_RESOURCES = "spec.rayClusterSpec.workerGroupSpecs[].resources"


@pytest.fixture(scope="module")
def floor_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("kuberay-floor"), Ports.free(), ray_job_running_seconds=2)
    local.start()
    install_crd(local)
    try:
        yield local
    finally:
        local.stop()


def strip_worker_group_resources(cluster: LocalCluster) -> None:
    """The RayJob CRD as KubeRay v1.4 ships it: no workerGroupSpecs[].resources."""
    crd = get(cluster, "crd", "rayjobs.ray.io")
    index = [v["name"] for v in crd["spec"]["versions"]].index("v1")
    path = (f"/spec/versions/{index}/schema/openAPIV3Schema/properties/spec/properties/rayClusterSpec/properties/"
            "workerGroupSpecs/items/properties/resources")
    cluster.kubectl("patch", "crd", "rayjobs.ray.io", "--type=json",
                    "-p", json.dumps([{"op": "remove", "path": path}]))


def restore_kuberay_crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(cluster.bin("kuberay-crds")))
    cluster.wait_established("rayjobs.ray.io")


@pytest.fixture
def old_kuberay(floor_cluster: LocalCluster) -> Iterator[LocalCluster]:
    strip_worker_group_resources(floor_cluster)
    try:
        yield floor_cluster
    finally:
        restore_kuberay_crds(floor_cluster)


def helm(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    # HOME kept: without it helm writes its discovery cache to ./.kube in the working directory.
    return subprocess.run([str(cluster.helm_path), *args], env={**os.environ, **cluster.env()}, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture
def operator(floor_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    """Our operator, retrying a refused job every 3 s (the chart's default is 30)."""
    process = OperatorProcess(floor_cluster, floor_cluster.log_dir,
                              extra_env={"GRPO_OPERATOR_DEPENDENCY_RETRY_SECONDS": "3"})
    yield process
    process.stop()


def selftest(metrics_url: str) -> subprocess.CompletedProcess:
    """`helm test`'s command (templates/tests/install-check.yaml), against an operator on loopback."""
    return subprocess.run([sys.executable, "-m", "grpo_operator.selftest", f"--metrics-url={metrics_url}",
                           "--version=0.1.0", "--wait=10"], capture_output=True, text=True, timeout=60, check=False)


def namespace(cluster: LocalCluster, name: str) -> str:
    create_namespace(cluster, name)
    return prepare_job_namespace(cluster, name)


def _refused_for_kuberay(cluster: LocalCluster, ns: str) -> dict:
    wait_phase(cluster, ns, JOB, "Invalid", timeout=60)
    valid = condition(get(cluster, "grpojob", JOB, "-n", ns), "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "UnsupportedKubeRay")
    assert f"lacks {WORKER_RESOURCES} (KubeRay >= 1.5.0" in valid["message"]
    assert "Install KubeRay v1.5.0 or later" in valid["message"]
    events = items(cluster, "events", "-n", ns, "--field-selector", f"involvedObject.name={JOB}")
    assert any(e["reason"] == "UnsupportedKubeRay" and e["type"] == "Warning" for e in events)
    assert items(cluster, "rayjobs", "-n", ns) == []  # never a RayJob whose placement would be pruned
    return valid


def test_the_chart_refuses_to_install_over_a_kuberay_without_worker_group_resources(
        old_kuberay: LocalCluster) -> None:
    create_namespace(old_kuberay, "grpo-dry")
    # A server-side dry run renders against the live cluster (the check's lookup) but installs no CRDs,
    # so the kopf peering object, whose CRD the chart brings, is left out here.
    dry_run = ("install", "grpo", str(CHART), "-n", "grpo-dry", "--dry-run=server",
               "--set", "operator.peering.enabled=false")
    refused = helm(old_kuberay, *dry_run)
    assert refused.returncode != 0
    assert f"lacks {WORKER_RESOURCES} (KubeRay >= 1.5.0" in refused.stderr, refused.stderr
    restore_kuberay_crds(old_kuberay)
    accepted = helm(old_kuberay, *dry_run)
    assert accepted.returncode == 0, accepted.stderr


def test_an_operator_started_over_an_old_kuberay_refuses_jobs_until_it_is_upgraded(
        old_kuberay: LocalCluster, operator: OperatorProcess) -> None:
    operator.start()
    log = operator.log.read_text()
    assert "KubeRay is not usable" in log and WORKER_RESOURCES in log
    assert selftest(operator.metrics_url).returncode == 1  # `helm test` fails on this install
    ns = namespace(old_kuberay, "team-old-at-start")
    apply_job(old_kuberay, ns, example("colocated-length"))
    _refused_for_kuberay(old_kuberay, ns)

    restore_kuberay_crds(old_kuberay)  # the upgrade: the job starts by itself
    wait_phase(old_kuberay, ns, JOB, "Succeeded", timeout=120)
    check = selftest(operator.metrics_url)
    assert check.returncode == 0, check.stdout


def test_a_kuberay_downgraded_after_start_is_caught_by_strict_creation(
        floor_cluster: LocalCluster, operator: OperatorProcess) -> None:
    operator.start()  # over a compatible KubeRay: its CRD is not read again
    assert "has every field the operator renders" in operator.log.read_text()
    strip_worker_group_resources(floor_cluster)
    try:
        ns = namespace(floor_cluster, "team-old-later")
        apply_job(floor_cluster, ns, example("colocated-length"))
        _refused_for_kuberay(floor_cluster, ns)  # the apiserver refused the RayJob's unknown field
    finally:
        restore_kuberay_crds(floor_cluster)
    wait_phase(floor_cluster, ns, JOB, "Succeeded", timeout=120)


def test_helm_test_passes_on_a_working_install(floor_cluster: LocalCluster, operator: OperatorProcess) -> None:
    create_namespace(floor_cluster, "grpo-system")
    floor_cluster.kubectl("label", "namespace", "grpo-system", "pod-security.kubernetes.io/enforce=restricted")
    installed = helm(floor_cluster, "install", "grpo", str(CHART), "-n", "grpo-system", "--wait", "--timeout", "120s")
    assert installed.returncode == 0, installed.stderr
    # KWOK plays the pods, so `helm test` proves the check is admitted (restricted) and run to completion...
    tested = helm(floor_cluster, "test", "grpo", "-n", "grpo-system", "--timeout", "120s")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "install-check" in tested.stdout and "Succeeded" in tested.stdout
    check = get(floor_cluster, "job", "grpo-grpo-operator-install-check", "-n", "grpo-system")
    command = check["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "grpo_operator.selftest"]
    # ...and its command, run here against a real operator, is what decides.
    operator.start()
    passed = selftest(operator.metrics_url)
    assert passed.returncode == 0, passed.stdout
    assert "ok: grpo-operator 0.1.0" in passed.stdout
    wait_for("no helm test pod left failing", lambda: all(
        p["status"].get("phase") == "Succeeded"
        for p in items(floor_cluster, "pods", "-n", "grpo-system", "-l", "app.kubernetes.io/component=install-check")))
