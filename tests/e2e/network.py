"""The network rule over a running local cluster: every namespace its processes and its pods live in."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import psutil
from grpo_devcluster import netcheck, node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.node import CGROUP_PARENTS

# The real node's pods and Services: addresses of namespaces the run created (the host blackholes the rest of
# 10.244.0.0/16, and pods have no default route).
NODE_RANGES = (ipaddress.ip_network(node_config.POD_SUBNET), ipaddress.ip_network(node_config.SERVICE_CIDR))


def component_pids(cluster: LocalCluster) -> list[int]:
    """The control plane's and the node's processes, with their children (KubeRay's, the shims', ...)."""
    pids = []
    for pid in cluster.running_pids().values():
        try:
            parent = psutil.Process(pid)
            pids += [parent.pid, *(child.pid for child in parent.children(recursive=True))]
        except psutil.NoSuchProcess:
            continue
    return pids


def pod_pids() -> list[int]:
    """Every process in the real node's pod cgroups (the kubelet's kubepods, containerd's k8s.io)."""
    pids = []
    for parent in CGROUP_PARENTS:
        for procs in Path("/sys/fs/cgroup/pids", parent).glob("**/cgroup.procs"):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def network_report(cluster: LocalCluster) -> netcheck.Report:
    components = component_pids(cluster)
    allowed = NODE_RANGES if cluster.real_node else ()
    return netcheck.check(components, [*components, *pod_pids()], allowed)
