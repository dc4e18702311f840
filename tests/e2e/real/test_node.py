"""The real node beside KWOK's: what it is, the network rule, and that stopping it leaves the host as it was.

Network rule (tests may send traffic only to loopback or into network namespaces the run created): the
node's addresses (10.244.0.0/24 and the Service IP 10.244.1.1) live in its own namespace and its pods';
the host reaches them through a veth and blackholes the rest of 10.244.0.0/16; pods have no default
route; ip_forward is left as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from grpo_devcluster import netcheck, node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import POOL_LABEL

from ..kube import create_namespace, delete_namespace, get, items, wait_for, wait_object
from ..network import network_report
from .conftest import ON_REAL_NODE, NodeImages

pytestmark = pytest.mark.e2e

# A documentation address (TEST-NET-3): connecting a UDP socket only looks up a route and sends nothing.
OUTSIDE = "203.0.113.1"


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


def test_a_pod_without_the_toleration_never_lands_on_the_real_node(real_node: LocalCluster, scratch_ns: str) -> None:
    namespace = scratch_ns
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
                                                                         node_images: NodeImages,
                                                                         scratch_ns: str) -> None:
    namespace = scratch_ns
    real_node.apply(_probe_pod(namespace, node_images.operator, ROUTES_SCRIPT, **ON_REAL_NODE))
    wait_for("the probe pod to finish", lambda: get(real_node, "pod", "probe", "-n", namespace)["status"].get(
        "phase") in ("Succeeded", "Failed"), timeout=120)
    seen = json.loads(real_node.kubectl("logs", "probe", "-n", namespace).stdout.strip().splitlines()[-1])
    destinations = {(dst, mask) for dst, mask, _gw in seen["routes"]}
    assert ("0.0.0.0", "0.0.0.0") not in destinations  # no default route
    assert destinations == {("10.244.0.0", "255.255.255.0"), ("10.244.1.0", "255.255.255.0")}
    assert seen["outside"] == "Network is unreachable"
    assert seen["apiserver"] == node_config.API_SERVICE_IP


SLEEPER_MARK = "grpo-netcheck-sleeper"


@pytest.fixture(scope="module")
def sleeping_pod(real_node: LocalCluster, node_images: NodeImages) -> Iterator[tuple[str, int]]:
    """A pod on the real node that holds still: (namespace, the host pid of its process)."""
    namespace = create_namespace(real_node, "netcheck")
    script = f"import time  # {SLEEPER_MARK}-{namespace}\ntime.sleep(3600)"
    real_node.api.apply(_probe_pod(namespace, node_images.operator, script, **ON_REAL_NODE))
    wait_object(real_node, "pods", "probe", namespace, lambda pod: (pod or {}).get("status", {}).get("phase")
                == "Running", timeout=120, what="the sleeping pod running")

    def host_pid() -> int | None:
        for proc in psutil.process_iter(["cmdline"]):
            if any(f"{SLEEPER_MARK}-{namespace}" in part for part in proc.info["cmdline"] or []):
                return proc.pid
        return None

    pid = wait_for("the sleeping pod's process on the host", host_pid, timeout=30)
    yield namespace, pid
    delete_namespace(real_node, namespace)


def test_traffic_stays_on_loopback_or_inside_the_namespaces_of_the_node(
        real_node: LocalCluster, sleeping_pod: tuple[str, int]) -> None:
    _, pod_pid = sleeping_pod
    report = network_report(real_node)
    assert report.problems == []
    # Judged where the sockets are: the host's (the cluster's own sockets), the node's and the pods'.
    judged = set(report.namespaces)
    assert netcheck.netns(pod_pid) in judged
    assert netcheck.netns(real_node.node.holder_pid) in judged
    assert any(n.endswith("(host: the cluster's own sockets)") for n in judged)
    assert report.sockets > 20
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


# Run inside the pod's network namespace only (nsenter --net): a route to TEST-NET-2 through the pod's own
# interface, then a UDP socket connected to an address there. A UDP connect only picks a route; nothing is sent.
OUTSIDE_PEER = "198.51.100.7"
CONNECTED_SOCKET = f"""
import socket, subprocess, sys, time
subprocess.run(["ip", "route", "add", "198.51.100.0/24", "dev", "eth0"], check=True)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("{OUTSIDE_PEER}", 53))
print("connected", flush=True)
sys.stdin.read()
"""


def test_a_pod_connected_to_an_address_outside_the_pod_range_is_caught(
        real_node: LocalCluster, sleeping_pod: tuple[str, int]) -> None:
    """The check fails when it should: a socket in a pod's namespace with a peer outside the run's ranges. (The
    earlier check, psutil's per-process connections read from the test's own namespace, passed here.)"""
    _, pod_pid = sleeping_pod
    holder = subprocess.Popen(["nsenter", f"--net=/proc/{pod_pid}/ns/net", "--", sys.executable, "-c",
                               CONNECTED_SOCKET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "connected"
        problems = network_report(real_node).problems
    finally:
        holder.communicate("", timeout=30)
        subprocess.run(["nsenter", f"--net=/proc/{pod_pid}/ns/net", "--", "ip", "route", "del", "198.51.100.0/24"],
                       check=False, capture_output=True)
    assert [p for p in problems if OUTSIDE_PEER in p and netcheck.netns(pod_pid) in p], problems
