"""Session fixtures shared by every test tier."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster.cluster import LocalCluster, Ports

# The real node (containerd + kubelet in namespaces of its own) needs root and a few Debian packages
# (hack/bootstrap installs them). CI always runs it; GRPO_DEVCLUSTER_REAL_NODE=0 leaves it out on a
# machine that cannot, and the tests that need it are then skipped saying so.
REAL_NODE = os.environ.get("GRPO_DEVCLUSTER_REAL_NODE", "1") != "0"
# hack/test starts the cluster in the background while the unit tier runs, and hands its directory to the
# e2e tier here: the session attaches to it instead of starting one (and leaves stopping it to hack/test).
ATTACH_ENV = "GRPO_TEST_CLUSTER_DIR"
RAY_JOB_SECONDS_ENV = "GRPO_DEVCLUSTER_RAY_JOB_SECONDS"


def pytest_configure(config: pytest.Config) -> None:
    """Every local Ray of the tests runs without token authentication, and under pytest-xdist each worker gets a
    Ray directory of its own.

    Ray 2.52 turns token authentication on for a new local `ray.init()` unless RAY_AUTH_MODE says otherwise,
    while a process that once joined a cluster with RAY_AUTH_MODE=disabled (tests/gpu/test_raycluster.py, as our
    bench clusters run) keeps that mode for its later clusters: which test ran before decided whether a later
    local Ray accepted its own driver. One mode for all of them removes the order. A local Ray one test starts
    writes its address to <dir>/ray_current_cluster, where another worker's ray.init would find and join it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "RAY_TMPDIR" not in os.environ:
        ray_dir = Path(tempfile.gettempdir()) / f"grpo-ray-{os.getppid()}-{worker}"
        ray_dir.mkdir(parents=True, exist_ok=True)
        os.environ["RAY_TMPDIR"] = str(ray_dir)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The real local control plane (built on first use, cached after), on free loopback ports, with the
    real node beside KWOK's fake GPU nodes."""
    attached = os.environ.get(ATTACH_ENV)
    if attached:
        local = LocalCluster.attach(Path(attached))
        if REAL_NODE and not local.real_node:
            pytest.fail(f"{ATTACH_ENV}={attached} runs no real node, and GRPO_DEVCLUSTER_REAL_NODE is not 0")
        if local.real_node:
            local.attach_node()
        yield local
        return
    workdir: Path = tmp_path_factory.mktemp("devcluster")
    running_seconds = float(os.environ.get(RAY_JOB_SECONDS_ENV, "3"))
    local = LocalCluster(workdir, Ports.free(), ray_job_running_seconds=running_seconds, real_node=REAL_NODE)
    with local.running_until_exit():
        yield local
