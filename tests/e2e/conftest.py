"""The operator, running against the real local control plane, for every operator e2e test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess, prepare_job_namespace, running_operator

from .kube import create_namespace

_counter = itertools.count()


@pytest.fixture(scope="session")
def grpo_operator(cluster: LocalCluster) -> Iterator[OperatorProcess]:
    with running_operator(cluster) as operator:
        yield operator


@pytest.fixture
def team_ns(cluster: LocalCluster, grpo_operator: OperatorProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace with the `models`, `datasets` and `exports` claims the examples mount.

    Its GRPOJobs are deleted afterwards: a job left running, or a failed one's Ray cluster (kept for its
    logs, spec.scheduling.keepFailedClusterSeconds), would hold fake GPUs the session's next tests need.
    """
    name = f"t{next(_counter)}-{request.node.name.lower().replace('_', '-')}"[:50].rstrip("-")
    create_namespace(cluster, name)  # waits for the namespace's default ServiceAccount
    yield prepare_job_namespace(cluster, name)
    cluster.kubectl("delete", "grpojobs", "--all", "-n", name, "--wait=false")
