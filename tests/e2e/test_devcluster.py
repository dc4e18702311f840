"""The local control plane does what a real one does: schedules, runs KubeRay, collects garbage."""

from __future__ import annotations

import io
import ipaddress
import json
import socket
import urllib.request

import psutil
import pytest
from grpo_devcluster import node_config, processes
from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.errors import DevClusterError
from grpo_devcluster.kwok_config import GPU_PRODUCT, POOL_LABEL

from .grpojobs import set_ray_outcome
from .kube import get, items, wait_for
from .network import network_report

pytestmark = pytest.mark.e2e


def _worker_group(name: str, pool: str, gpus: int, replicas: int = 1) -> dict:
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "rayStartParams": {},
        "template": {"spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": str(3 * gpus),
                                                     "memory": "64Gi"},
                                          "requests": {"cpu": str(3 * gpus), "memory": "64Gi"}}}],
        }},
    }


def _ray_cluster_spec(*groups: dict) -> dict:
    return {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [{
                "name": "ray-head", "image": "rayproject/ray:2.52.1",
                "resources": {"limits": {"cpu": "2", "memory": "8Gi"}}}]}},
        },
        "workerGroupSpecs": list(groups),
    }


def _ray_cluster(name: str, namespace: str, *groups: dict) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": namespace}, "spec": _ray_cluster_spec(*groups)}


def _pods_of(cluster: LocalCluster, namespace: str, ray_cluster: str) -> list[dict]:
    return items(cluster, "pods", "-n", namespace, "-l", f"ray.io/cluster={ray_cluster}")


def test_fake_gpu_nodes_have_eight_gpus_in_two_pools(cluster: LocalCluster) -> None:
    # KWOK's nodes; the real node (tests/e2e/real) is tainted and in no pool
    nodes = [n for n in items(cluster, "nodes") if n["metadata"]["name"] != node_config.NODE_NAME]
    assert len(nodes) >= 4
    for node in nodes:
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == GPU_PRODUCT
        assert not node["spec"].get("taints")
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
    assert {n["metadata"]["labels"][POOL_LABEL] for n in nodes} >= {"train", "rollout"}


def test_kubectl_lists_nodes_and_reports_the_pinned_version(cluster: LocalCluster) -> None:
    names = cluster.kubectl("get", "nodes", "-o", "name").stdout.split()
    assert len(names) >= 4
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.34.4"


def test_raycluster_worker_groups_land_on_their_pools(cluster: LocalCluster, scratch_ns: str) -> None:
    ns = scratch_ns
    cluster.apply(_ray_cluster("pinned", ns, _worker_group("actor", "train", 4),
                               _worker_group("rollout", "rollout", 2)))
    wait_for("3 running pods", lambda: [p["status"].get("phase") for p in _pods_of(cluster, ns, "pinned")]
             == ["Running"] * 3)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(POOL_LABEL) for n in items(cluster, "nodes")}
    for pod in _pods_of(cluster, ns, "pinned"):
        group = pod["metadata"]["labels"].get("ray.io/group")
        if group == "headgroup":
            continue
        expected_pool = {"actor": "train", "rollout": "rollout"}[group]
        assert nodes[pod["spec"]["nodeName"]] == expected_pool, pod["metadata"]["name"]
        assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback
    wait_for("RayCluster ready",
             lambda: get(cluster, "raycluster", "pinned", "-n", ns).get("status", {}).get("state") == "ready")


def test_worker_group_larger_than_any_node_stays_pending(cluster: LocalCluster, scratch_ns: str) -> None:
    ns = scratch_ns
    cluster.apply(_ray_cluster("huge", ns, _worker_group("actor", "train", 16)))

    def pending_unschedulable() -> bool:
        workers = [p for p in _pods_of(cluster, ns, "huge") if p["metadata"]["labels"].get("ray.io/group") == "actor"]
        if not workers:
            return False
        conditions = {c["type"]: c for c in workers[0]["status"].get("conditions", [])}
        scheduled = conditions.get("PodScheduled", {})
        return workers[0]["status"].get("phase") == "Pending" and scheduled.get("reason") == "Unschedulable"

    wait_for("the 16-GPU worker to be unschedulable", pending_unschedulable)
    worker = next(p for p in _pods_of(cluster, ns, "huge") if p["metadata"]["labels"].get("ray.io/group") == "actor")
    message = {c["type"]: c for c in worker["status"]["conditions"]}["PodScheduled"]["message"]
    assert "nvidia.com/gpu" in message


def _rayjob(name: str, namespace: str) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"entrypoint": "python -c 'print(1)'", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": _ray_cluster_spec(_worker_group("actor", "train", 1))}}


def _deployment_status(cluster: LocalCluster, ns: str, name: str) -> str:
    return get(cluster, "rayjob", name, "-n", ns).get("status", {}).get("jobDeploymentStatus", "")


@pytest.mark.parametrize(("outcome", "final"), [("SUCCEEDED", "Complete"), ("FAILED", "Failed")])
def test_rayjob_runs_then_reaches_the_outcome_the_test_chose(cluster: LocalCluster, scratch_ns: str, outcome: str,
                                                            final: str) -> None:
    ns = scratch_ns
    set_ray_outcome(cluster, ns, "train", outcome, f"simulated {outcome}")
    cluster.apply(_rayjob("train", ns))
    wait_for("RayJob Running", lambda: _deployment_status(cluster, ns, "train") in ("Running", final), 120)
    wait_for(f"RayJob {final}", lambda: _deployment_status(cluster, ns, "train") == final, 120)
    status = get(cluster, "rayjob", "train", "-n", ns)["status"]
    assert status["jobStatus"] == outcome
    assert status.get("message") == f"simulated {outcome}"


def test_dashboard_calls_went_through_the_loopback_standin(cluster: LocalCluster, scratch_ns: str) -> None:
    ns = scratch_ns
    cluster.apply(_rayjob("probe", ns))
    wait_for("RayJob Complete", lambda: _deployment_status(cluster, ns, "probe") == "Complete", 120)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{cluster.dashboard_standin_url}/-/requests", timeout=5) as response:
        seen = json.load(response)
    hosts = {r["host"] for r in seen if r["path"].startswith("/api/jobs/probe-")}
    assert hosts and all(h.endswith(f".{ns}.svc.cluster.local:8265") for h in hosts), hosts


def test_deleting_a_raycluster_garbage_collects_its_pods(cluster: LocalCluster, scratch_ns: str) -> None:
    ns = scratch_ns
    cluster.apply(_ray_cluster("doomed", ns, _worker_group("actor", "train", 1)))
    wait_for("pods", lambda: len(_pods_of(cluster, ns, "doomed")) == 2)
    cluster.kubectl("delete", "raycluster", "doomed", "-n", ns, "--wait=false")
    wait_for("pods gone", lambda: not _pods_of(cluster, ns, "doomed"))


def test_components_only_talk_to_loopback(cluster: LocalCluster) -> None:
    """Judged in the namespace each component lives in (the real node's kubelet, containerd and CoreDNS live in
    the node's), not only the test's own: tests/e2e/real/test_node.py does the pods and a socket that breaks it."""
    report = network_report(cluster)
    assert report.problems == []
    assert any(n.endswith("(host: the cluster's own sockets)") for n in report.namespaces)
    assert report.sockets > 10


def test_port_in_use_names_the_component_and_leaves_nothing_running(tmp_path) -> None:
    ports = Ports.free()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", ports.apiserver))
        blocker.listen()
        with pytest.raises(DevClusterError) as error:
            LocalCluster(tmp_path / "c", ports).start()
    assert error.value.component == "apiserver"
    assert f"port {ports.apiserver}" in str(error.value)
    assert not any(processes.is_listening(p) for p in (ports.etcd_client, ports.kwok))


def test_stop_leaves_no_process_and_no_port_and_a_start_reuses_the_build(cluster: LocalCluster, tmp_path) -> None:
    """A cluster of its own (the test stops it), started once: the session's cluster built every binary
    already, so this start builds nothing; its stop leaves no process and no port behind."""
    ports = Ports.free()
    log = io.StringIO()
    local = LocalCluster(tmp_path / "c", ports, log=log)
    local.start()
    pids = dict(local.running_pids())
    assert all(local.running().values())
    local.stop()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids.values())
    assert not any(processes.is_listening(port) for port in ports.owners())
    assert "control plane up" in log.getvalue()
    assert "building" not in log.getvalue()
