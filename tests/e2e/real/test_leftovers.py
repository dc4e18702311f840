"""A real node killed without stop leaves its network namespace and veth behind (the kernel keeps them); the next
node's start removes them, and spares the node that runs. A dead node is staged here without its address (a real
leftover carries the host's address on the pod subnet, which would cut the running node off while the test runs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from grpo_devcluster import leftovers, node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.node import cgroup_parents, changes_from_state, undo_host_changes

from ..kube import get

pytestmark = pytest.mark.e2e

DEAD_RECORDED, DEAD_UNRECORDED = "grpo-node-99991", "grpo-node-99992"


def _ip(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *argv], capture_output=True, text=True, check=True)


def _links() -> str:
    return _ip("-o", "link").stdout


@pytest.fixture
def dead_nodes():
    """Two nodes' namespaces with nothing running in them, one registered by a starter long gone."""
    for name, veth in ((DEAD_RECORDED, "grpo-h99991"), (DEAD_UNRECORDED, "grpo-h99992")):
        _ip("netns", "add", name)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "grpo-n0", "netns", name)
    record = leftovers.REGISTRY / f"{DEAD_RECORDED}.json"
    record.write_text(json.dumps({"changes": {"netns": DEAD_RECORDED, "veth": "grpo-h99991"},
                                  "starter_pid": 1, "starter_started": "never"}))
    yield
    for name in (DEAD_RECORDED, DEAD_UNRECORDED):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    record.unlink(missing_ok=True)


def test_a_dead_nodes_namespace_and_veth_are_removed_and_the_running_node_is_spared(
        real_node: LocalCluster, dead_nodes: None) -> None:
    live = real_node.node.changes.netns
    routes_before = _ip("route").stdout
    assert "grpo-h99991" in _links() and "grpo-h99992" in _links()

    removed = leftovers.remove_leftovers(lambda c: undo_host_changes(changes_from_state(c)), node_config.POD_RANGE,
                                         cgroup_parents())

    assert removed == [f"the node {DEAD_RECORDED} (recorded): namespace, veth, sysctls, cgroups",
                       f"the node namespace {DEAD_UNRECORDED} (unrecorded, no process in it)"]
    netns = [p.name for p in Path("/run/netns").iterdir()]
    assert DEAD_RECORDED not in netns and DEAD_UNRECORDED not in netns and live in netns
    assert "grpo-h99991" not in _links() and "grpo-h99992" not in _links()
    assert [r.netns for _, r in leftovers.registrations()] == [live]
    assert _ip("route").stdout == routes_before  # the running node's blackhole and veth route stay
    ready = [c for c in get(real_node, "node", node_config.NODE_NAME)["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
