"""The cloud-like profile (hack/grpo_devcluster/cloud_profile.py) and an operator on it, for this package's tests.

A cluster of its own: the profile differs from the session's cluster in what the apiserver admits
(ExtendedResourceToleration), in its nodes (zones, GFD labels, GPU taints, no label of ours) and in its default
storage (zonal, WaitForFirstConsumer), so the session's tests, written for the kind profile, cannot share it. It
lives for this package only, and the package runs first in the e2e tier (pytest collects `cloud/` before the
tier's files), so the two clusters are up together only while it runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.operator_runner import TEST_TIMERS, OperatorProcess, running_operator


@pytest.fixture(scope="package")
def cloud_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running_seconds = float(os.environ.get("GRPO_DEVCLUSTER_RAY_JOB_SECONDS", "3"))
    local = LocalCluster(tmp_path_factory.mktemp("cloud-cluster"), Ports.free(),
                         ray_job_running_seconds=running_seconds, cloud=True)
    with local.running_until_exit():
        yield local


@pytest.fixture(scope="package")
def cloud_operator(cloud_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    with running_operator(cloud_cluster, TEST_TIMERS) as operator:
        yield operator
