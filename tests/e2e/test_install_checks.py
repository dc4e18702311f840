"""An install on a cluster whose KubeRay is too old.

On the session's cluster, with its operator paused for the module: the tests edit the cluster-wide RayJob CRD
(stripping the field KubeRay v1.5.0 added; every test puts it back) and run operators of their own. (`helm test`
on a working install is test_chart.py's.)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import TEST_TIMERS, OperatorProcess, install_crd, prepare_job_namespace

from .grpojobs import apply_job, condition, example, wait_phase
from .helm import CHART, helm, selftest
from .kube import create_namespace, delete_namespace, get, items, wait_event

pytestmark = pytest.mark.e2e

JOB = "qwen2-7b-length"
WORKER_RESOURCES = "spec.rayClusterSpec.workerGroupSpecs[].resources"
NAMESPACES = ("grpo-dry", "team-old-at-start", "team-old-later", "team-kuberay-150")


@pytest.fixture(scope="module")
def floor_cluster(cluster: LocalCluster, operator_paused: None) -> Iterator[LocalCluster]:
    yield cluster
    for namespace in NAMESPACES:  # before the session's operator comes back
        delete_namespace(cluster, namespace, wait_for_jobs=True)


def strip_rayjob_schema(cluster: LocalCluster, under_cluster_spec: str) -> None:
    """Remove `under_cluster_spec` (a JSON-pointer tail below spec.rayClusterSpec) from the RayJob CRD's v1 schema:
    the CRD of a KubeRay release that had not added it yet."""
    crd = get(cluster, "crd", "rayjobs.ray.io")
    index = [v["name"] for v in crd["spec"]["versions"]].index("v1")
    path = (f"/spec/versions/{index}/schema/openAPIV3Schema/properties/spec/properties/rayClusterSpec/properties/"
            + under_cluster_spec)
    cluster.kubectl("patch", "crd", "rayjobs.ray.io", "--type=json",
                    "-p", json.dumps([{"op": "remove", "path": path}]))


def strip_worker_group_resources(cluster: LocalCluster) -> None:
    """The RayJob CRD as KubeRay v1.4 ships it: no workerGroupSpecs[].resources."""
    strip_rayjob_schema(cluster, "workerGroupSpecs/items/properties/resources")


def strip_auth_options(cluster: LocalCluster) -> None:
    """The RayJob CRD as KubeRay v1.5.0 ships it: no rayClusterSpec.authOptions (Ray token authentication)."""
    strip_rayjob_schema(cluster, "authOptions")


def restore_kuberay_crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(cluster.bin("kuberay-manifests")))
    cluster.wait_established("rayjobs.ray.io")


@pytest.fixture
def old_kuberay(floor_cluster: LocalCluster) -> Iterator[LocalCluster]:
    strip_worker_group_resources(floor_cluster)
    try:
        yield floor_cluster
    finally:
        restore_kuberay_crds(floor_cluster)


@pytest.fixture
def operator(floor_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    """Our operator with the e2e timers: a refused job is retried every 2 s (the chart's default is 30)."""
    process = OperatorProcess(floor_cluster, floor_cluster.log_dir, extra_env=TEST_TIMERS)
    yield process
    process.stop()


def namespace(cluster: LocalCluster, name: str) -> str:
    create_namespace(cluster, name)
    return prepare_job_namespace(cluster, name)


def _refused_for_kuberay(cluster: LocalCluster, ns: str) -> dict:
    wait_phase(cluster, ns, JOB, "Invalid", timeout=60)
    valid = condition(get(cluster, "grpojob", JOB, "-n", ns), "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "UnsupportedKubeRay")
    assert f"lacks {WORKER_RESOURCES} (KubeRay >= 1.5.0" in valid["message"]
    assert "Install KubeRay v1.5.0 or later" in valid["message"]
    wait_event(cluster, ns, JOB, "UnsupportedKubeRay")
    assert items(cluster, "rayjobs", "-n", ns) == []  # never a RayJob whose placement would be pruned
    return valid


def test_the_chart_refuses_to_install_over_a_kuberay_without_worker_group_resources(
        old_kuberay: LocalCluster) -> None:
    create_namespace(old_kuberay, "grpo-dry")
    # A server-side dry run renders against the live cluster (the check's lookup) but installs no CRDs,
    # so the kopf peering object, whose CRD the chart brings, is left out here.
    dry_run = ("install", "grpo", str(CHART), "-n", "grpo-dry", "--dry-run=server",
               "--set", "operator.peering.enabled=false")
    refused = helm(old_kuberay, *dry_run, check=False)
    assert refused.returncode != 0
    assert f"lacks {WORKER_RESOURCES} (KubeRay >= 1.5.0" in refused.stderr, refused.stderr
    restore_kuberay_crds(old_kuberay)
    accepted = helm(old_kuberay, *dry_run, check=False)
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
    wait_phase(old_kuberay, ns, JOB, "Running", timeout=120)
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
    wait_phase(floor_cluster, ns, JOB, "Running", timeout=120)


def test_kuberay_1_5_0_runs_jobs_without_ray_auth_and_refuses_token_jobs_naming_the_field(
        floor_cluster: LocalCluster, operator: OperatorProcess) -> None:
    strip_auth_options(floor_cluster)
    try:
        operator.start()  # the CRD has every field every job needs: KubeRay is usable
        assert "has every field the operator renders" in operator.log.read_text()
        ns = namespace(floor_cluster, "team-kuberay-150")
        token = example("colocated-length")
        disabled = example("colocated-length", security={"rayAuth": "disabled"})
        disabled["metadata"]["name"] = "open-ray"
        apply_job(floor_cluster, ns, token)
        apply_job(floor_cluster, ns, disabled)
        wait_phase(floor_cluster, ns, "open-ray", "Running", timeout=120)
        wait_phase(floor_cluster, ns, JOB, "Invalid", timeout=60)
        valid = condition(get(floor_cluster, "grpojob", JOB, "-n", ns), "Valid")
        assert (valid["status"], valid["reason"]) == ("False", "UnsupportedKubeRay")
        assert "spec.security.rayAuth is token" in valid["message"]
        assert "KubeRay v1.5.1 or later" in valid["message"]
        assert "spec.security.rayAuth: disabled" in valid["message"]
        assert [r["metadata"]["name"] for r in items(floor_cluster, "rayjobs", "-n", ns)] == ["open-ray"]
    finally:
        restore_kuberay_crds(floor_cluster)
    wait_phase(floor_cluster, ns, JOB, "Running", timeout=120)  # upgraded: the token job starts by itself


def test_a_stale_grpojob_crd_is_one_log_line_and_a_failing_readiness(
        floor_cluster: LocalCluster, operator: OperatorProcess) -> None:
    """After `helm upgrade` (which never upgrades CRDs) the old schema would prune the new fields silently."""
    label = "app.kubernetes.io/version"
    floor_cluster.kubectl("label", "crd", "grpojobs.grpo.dev", f"{label}=0.0.9", "--overwrite")
    try:
        operator.start(until="/healthz")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(f"{operator.health_url}/readyz", timeout=5)
        assert refused.value.code == 503
        (problem,) = json.loads(refused.value.read())["problems"]
        assert "is version 0.0.9 but this operator is 0.1.0" in problem
        assert "kubectl apply --server-side -f charts/grpo-operator/crds/" in problem
        assert [line for line in operator.log.read_text().splitlines() if "0.0.9" in line and "ERROR" in line]
    finally:
        operator.stop()
        install_crd(floor_cluster)  # the generated CRD, its label back
