"""Stopping the real node leaves the host as it was; the node then comes back as the other tests found it.

In a module of its own, so that no module-scoped fixture of another module (a pod of its own) lives while the
node is away; what a package- or session-scoped fixture runs there is a Deployment's pod (the operator pod),
which this test waits to see Ready again after the restart. So the real-node tests pass in any order.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster

from ..kube import items, wait_for
from .conftest import NodeImages

pytestmark = pytest.mark.e2e


def deployments_on_the_node(cluster: LocalCluster) -> list[tuple[str, str]]:
    """(namespace, name) of the Deployments with a pod on the real node."""
    owners = set()
    for pod in items(cluster, "pods", "--field-selector", f"spec.nodeName={node_config.NODE_NAME}"):
        for owner in pod["metadata"].get("ownerReferences", []):
            if owner["kind"] == "ReplicaSet":
                replica_set = cluster.api.find("replicasets", owner["name"], pod["metadata"]["namespace"])
                for parent in (replica_set or {}).get("metadata", {}).get("ownerReferences", []):
                    if parent["kind"] == "Deployment":
                        owners.add((pod["metadata"]["namespace"], parent["name"]))
    return sorted(owners)


def _ready_never_restarted(pod: dict) -> bool:
    containers = pod["status"].get("containerStatuses") or []
    return (not pod["metadata"].get("deletionTimestamp") and bool(containers)
            and all(c.get("ready") and c.get("restartCount") == 0 for c in containers))


def restart_as_it_was(cluster: LocalCluster, deployments: list[tuple[str, str]]) -> None:
    """Start the node again with our images in it, and give each Deployment that ran there a new pod, Ready: the
    one it had was stopped with the node (a restart the tests after this one would count), or replaced while the
    node went down."""
    cluster.start_node()
    cluster.load_node_images(("operator", "trainer"))
    for namespace, name in deployments:
        selector = cluster.api.get("deployments", name, namespace)["spec"]["selector"]["matchLabels"]
        labels = ",".join(f"{k}={v}" for k, v in selector.items())
        old = {p["metadata"]["uid"] for p in items(cluster, "pods", "-n", namespace, "-l", labels)}
        for pod in items(cluster, "pods", "-n", namespace, "-l", labels):
            cluster.api.delete("pods", pod["metadata"]["name"], namespace)

        def fresh(namespace: str = namespace, labels: str = labels, old: set[str] = old) -> bool:
            pods = items(cluster, "pods", "-n", namespace, "-l", labels)
            return bool(pods) and all(p["metadata"]["uid"] not in old and _ready_never_restarted(p) for p in pods)
        wait_for(f"Deployment {namespace}/{name} with a new Ready pod after the node's restart", fresh, timeout=240)


def _host_state() -> dict[str, object]:
    mounts = Path("/proc/mounts").read_text()
    return {
        "netns": sorted(p.name for p in Path("/run/netns").glob("*")) if Path("/run/netns").is_dir() else [],
        "links": subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("grpo"),
        "routes": subprocess.run(["ip", "route"], capture_output=True, text=True).stdout,
        "mounts": [line for line in mounts.splitlines() if "/kubelet" in line or "containerd" in line],
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/k8s.io")),
        "paths": [p for p in ("/var/lib/kubelet", "/run/containerd", "/var/lib/cni", "/var/log/pods") if
                  os.path.lexists(p)],
        "sysctls": {k: Path("/proc/sys", k).read_text().strip() for k in ("vm/overcommit_memory", "kernel/panic",
                                                                          "kernel/panic_on_oops")},
        "processes": sorted(p.info["name"] for p in psutil.process_iter(["name"])
                            if p.info["name"] in ("kubelet", "containerd", "coredns", "containerd-shim-runc-v2")),
    }


@pytest.mark.stops_the_node
def test_stopping_the_node_leaves_the_host_as_it_was(real_node: LocalCluster, node_images: NodeImages) -> None:
    deployments = deployments_on_the_node(real_node)
    before = dict(real_node.node.changes.sysctls)
    created = list(real_node.node.changes.created_paths)
    real_node.stop_node()
    after = _host_state()
    try:
        assert after["processes"] == []
        assert after["links"] == 0
        assert "10.244" not in after["routes"]
        assert after["mounts"] == []
        assert after["cgroups"] == []
        assert not [n for n in after["netns"] if n.startswith(("grpo-node", "cni-"))]
        assert after["sysctls"] == before
        assert not set(after["paths"]) & set(created)
    finally:
        restart_as_it_was(real_node, deployments)
