"""The real node beside KWOK's: what it is, the network rule, and that stopping it leaves the host as it was.

Network rule (tests may send traffic only to loopback or into network namespaces the run created): the
node's addresses (10.244.0.0/24 and the Service IP 10.244.1.1) live in its own namespace and its pods';
the host reaches them through a veth and blackholes the rest of 10.244.0.0/16; pods have no default
route; ip_forward is left as it was.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import POOL_LABEL

from ..kube import create_namespace, get, items, wait_for
from .conftest import ON_REAL_NODE, NodeImages

pytestmark = pytest.mark.e2e

NODE_RANGES = (ipaddress.ip_network(node_config.POD_SUBNET), ipaddress.ip_network(node_config.SERVICE_CIDR))
# A documentation address (TEST-NET-3): connecting a UDP socket only looks up a route and sends nothing.
OUTSIDE = "203.0.113.1"


def _allowed(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_loopback or address.is_unspecified or any(address in net for net in NODE_RANGES)


def test_real_node_is_ready_labelled_tainted_and_sized_like_a_gpu_node(real_node: LocalCluster) -> None:
    node = get(real_node, "node", node_config.NODE_NAME)
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert node["metadata"]["labels"][node_config.NODE_LABEL] == node_config.NODE_LABEL_VALUE
    assert node_config.NODE_TAINT["key"] in {t["key"] for t in node["spec"]["taints"]}
    assert node["status"]["allocatable"]["cpu"] == str(node_config.FAKE_CPUS)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(node_config.FAKE_GPUS)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    pools = {n["metadata"]["labels"].get(POOL_LABEL) for n in items(real_node, "nodes")}
    assert {"train", "rollout"} <= pools  # KWOK's fake GPU nodes are still there for the other tests


def _probe_pod(namespace: str, image: str, script: str, **spec: object) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never", **spec,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": image, "imagePullPolicy": "Never", "command": ["python", "-c",
                                                                                                     script],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                            "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}}}],
        },
    }


def test_a_pod_without_the_toleration_never_lands_on_the_real_node(real_node: LocalCluster) -> None:
    namespace = create_namespace(real_node, "plain-pods")
    real_node.apply(_probe_pod(namespace, "rayproject/ray:2.52.1", "pass"))
    node = wait_for("the plain pod scheduled", lambda: get(real_node, "pod", "probe", "-n", namespace)["spec"].get(
        "nodeName"))
    assert node != node_config.NODE_NAME


# What the probe pod reports from inside its own network namespace.
ROUTES_SCRIPT = f"""
import json, socket
routes = [line.split() for line in open('/proc/net/route').read().splitlines()[1:]]
def dotted(hexaddr):
    return socket.inet_ntoa(int(hexaddr, 16).to_bytes(4, 'little'))
out = {{'routes': [[dotted(r[1]), dotted(r[7]), dotted(r[2])] for r in routes]}}
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(('{OUTSIDE}', 53))
    out['outside'] = 'routable'
except OSError as e:
    out['outside'] = e.strerror
s = socket.create_connection(('kubernetes.default.svc', 443), timeout=5)
out['apiserver'] = s.getpeername()[0]
print(json.dumps(out))
"""


def test_pods_have_no_route_out_and_reach_the_api_server_inside_the_node(real_node: LocalCluster,
                                                                         node_images: NodeImages) -> None:
    namespace = create_namespace(real_node, "probe-routes")
    real_node.apply(_probe_pod(namespace, node_images.operator, ROUTES_SCRIPT, **ON_REAL_NODE))
    wait_for("the probe pod to finish", lambda: get(real_node, "pod", "probe", "-n", namespace)["status"].get(
        "phase") in ("Succeeded", "Failed"), timeout=120)
    seen = json.loads(real_node.kubectl("logs", "probe", "-n", namespace).stdout.strip().splitlines()[-1])
    destinations = {(dst, mask) for dst, mask, _gw in seen["routes"]}
    assert ("0.0.0.0", "0.0.0.0") not in destinations  # no default route
    assert destinations == {("10.244.0.0", "255.255.255.0"), ("10.244.1.0", "255.255.255.0")}
    assert seen["outside"] == "Network is unreachable"
    assert seen["apiserver"] == node_config.API_SERVICE_IP


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _cluster_processes(cluster: LocalCluster) -> list[psutil.Process]:
    """The control plane, the node's processes and everything in the node's containers' cgroups."""
    procs = []
    for pid in cluster.running_pids().values():
        if psutil.pid_exists(pid):
            parent = psutil.Process(pid)
            procs += [parent, *parent.children(recursive=True)]
    for cgroup in Path("/sys/fs/cgroup/pids").glob("k8s.io/**/cgroup.procs"):
        procs += [psutil.Process(int(p)) for p in cgroup.read_text().split() if psutil.pid_exists(int(p))]
    return procs


def test_traffic_stays_on_loopback_or_inside_the_namespaces_of_the_node(real_node: LocalCluster) -> None:
    host_netns = _netns(os.getpid())
    checked = 0
    for proc in _cluster_processes(real_node):
        try:
            connections = proc.net_connections(kind="inet")
            in_host = _netns(proc.pid) == host_netns
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            checked += 1
            if conn.raddr:
                assert _allowed(conn.raddr.ip), (proc.name(), conn)
            if conn.status == psutil.CONN_LISTEN and in_host:
                assert ipaddress.ip_address(conn.laddr.ip).is_loopback, (proc.name(), conn)
    assert checked > 20
    routes = subprocess.run(["ip", "route", "show", "match", "10.244.0.0/16"], capture_output=True, text=True,
                            check=True).stdout
    assert f"blackhole {node_config.POD_RANGE}" in routes
    node_netns = real_node.node.changes.netns
    inside = subprocess.run(["ip", "netns", "exec", node_netns, "ip", "route"], capture_output=True, text=True,
                            check=True).stdout
    assert "default" not in inside
    forward = subprocess.run(["ip", "netns", "exec", node_netns, "cat", "/proc/sys/net/ipv4/ip_forward"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert forward == "0"
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == real_node.node.changes.ip_forward


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
        real_node.start_node()  # the tests after this one run on it again; its images stay in containerd
        real_node.load_node_images(("operator", "trainer"))
