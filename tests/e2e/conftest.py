"""The operator, running against the real local control plane, for every operator e2e test."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import TEST_TIMERS, OperatorProcess, prepare_job_namespace, running_operator

from .example_runs import ExampleRuns, run_examples
from .kube import create_namespace, delete_namespace

_counter = itertools.count()


@pytest.fixture(scope="session")
def grpo_operator(cluster: LocalCluster) -> Iterator[OperatorProcess]:
    with running_operator(cluster, TEST_TIMERS) as operator:
        yield operator


@pytest.fixture(scope="module")
def operator_paused(grpo_operator: OperatorProcess) -> Iterator[None]:
    """For a module that runs operators of its own on the session's cluster (the chart's, an old KubeRay's): the
    session's operator stops meanwhile, or two operators would reconcile the same GRPOJobs."""
    grpo_operator.stop()
    yield
    grpo_operator.start()


def unique_name(request: pytest.FixtureRequest) -> str:
    """A namespace name no other test of the session uses (a counter and the test's own name)."""
    return re.sub(r"[^a-z0-9-]", "-", f"t{next(_counter)}-{request.node.name.lower()}")[:50].strip("-")


@pytest.fixture
def scratch_ns(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own, deleted afterwards with everything in it: what a test leaves running
    (a RayCluster, a failed job's Ray cluster kept for its logs) would hold fake GPUs later tests need."""
    name = create_namespace(cluster, unique_name(request))  # waits for the namespace's default ServiceAccount
    yield name
    delete_namespace(cluster, name)


@pytest.fixture
def team_ns(scratch_ns: str, cluster: LocalCluster, grpo_operator: OperatorProcess) -> str:
    """A scratch namespace with the `models`, `datasets` and `exports` claims the examples mount."""
    return prepare_job_namespace(cluster, scratch_ns)


@pytest.fixture(scope="session")
def example_runs(cluster: LocalCluster, grpo_operator: OperatorProcess) -> ExampleRuns:
    """Both examples, applied unchanged, run to Succeeded once per session (tests/e2e/example_runs.py)."""
    return run_examples(cluster)
