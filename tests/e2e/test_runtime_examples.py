"""The GRPORuntime examples (examples/runtimes/) as the apiserver judges them at `kubectl apply`: every runtime and
every job passes the installed CRDs' schemas, CEL rules and strict field validation. Server-side dry runs: nothing
is stored, so no runtime becomes this cluster's default. (That the jobs plan and render under their runtimes is
tests/unit/operator/test_runtime_examples.py's; they cannot run here: their pools are GKE's and EKS's.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess

from .grpojobs import EXAMPLES

RUNTIME_EXAMPLES = sorted((EXAMPLES / "runtimes").glob("*.yaml"))


def test_there_are_runtime_examples() -> None:
    assert len(RUNTIME_EXAMPLES) >= 4


@pytest.mark.parametrize("path", RUNTIME_EXAMPLES, ids=[p.stem for p in RUNTIME_EXAMPLES])
def test_the_apiserver_accepts_each_runtime_example_as_written(cluster: LocalCluster, scratch_ns: str,
                                                               grpo_operator: OperatorProcess, path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    if body["kind"] == "GRPOJob":  # namespaced; a GRPORuntime is cluster-scoped and takes no namespace
        body["metadata"]["namespace"] = scratch_ns
    # Refused (ApiError) for a schema or CEL violation, and under strict field validation for an unknown field.
    created = cluster.api.create(body, dry_run=True)
    assert (created["kind"], created["metadata"]["name"]) == (body["kind"], body["metadata"]["name"])
