"""Session fixtures shared by every test tier."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster.cluster import LocalCluster, Ports

# The real node (containerd + kubelet in namespaces of its own) needs root and a few Debian packages
# (hack/bootstrap installs them). CI always runs it; GRPO_DEVCLUSTER_REAL_NODE=0 leaves it out on a
# machine that cannot, and the tests that need it are then skipped saying so.
REAL_NODE = os.environ.get("GRPO_DEVCLUSTER_REAL_NODE", "1") != "0"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The real local control plane (built on first use, cached after), on free loopback ports, with the
    real node beside KWOK's fake GPU nodes."""
    workdir: Path = tmp_path_factory.mktemp("devcluster")
    running_seconds = float(os.environ.get("GRPO_DEVCLUSTER_RAY_JOB_SECONDS", "3"))
    local = LocalCluster(workdir, Ports.free(), ray_job_running_seconds=running_seconds, real_node=REAL_NODE)
    local.start()
    try:
        yield local
    finally:
        local.stop()
