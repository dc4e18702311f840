"""Session fixtures shared by every test tier."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster.cluster import LocalCluster, Ports


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The real local control plane (built on first use, cached after), on free loopback ports."""
    workdir: Path = tmp_path_factory.mktemp("devcluster")
    running_seconds = float(os.environ.get("GRPO_DEVCLUSTER_RAY_JOB_SECONDS", "3"))
    local = LocalCluster(workdir, Ports.free(), ray_job_running_seconds=running_seconds)
    local.start()
    try:
        yield local
    finally:
        local.stop()
