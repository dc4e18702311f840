"""An image that cannot be pulled, for real: the kubelet and containerd of the real node try to pull it, and the
GRPOJob says so within a check period instead of "checking the model, data, reward and memory fit" until the
preflight's 30-minute deadline (issue 30, failure 6; before the fix no condition or Event named the pull).

The reference names a registry on the node's own loopback, where nothing listens: containerd's pull is refused
inside the node's network namespace, and nothing leaves the machine.
"""

from __future__ import annotations

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import prepare_job_namespace

from ..example_runs import COLOCATED
from ..grpojobs import apply_job, example
from ..helm import Release
from ..kube import create_namespace, delete_namespace, wait_event, wait_object
from .conftest import ON_REAL_NODE

pytestmark = pytest.mark.e2e

MISSING_IMAGE = "127.0.0.1:5999/grpo/grpo-trainer:does-not-exist"


def _pods_not_ready(job: dict | None) -> dict | None:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodsReady" and c["status"] == "False"), None)


def test_an_image_that_cannot_be_pulled_is_said_on_the_job(real_node: LocalCluster, operator_pod: Release) -> None:
    namespace = create_namespace(real_node, "missing-image")
    try:
        prepare_job_namespace(real_node, namespace)
        body = example("colocated-length", image=MISSING_IMAGE,
                       placement={"mode": "colocated", "roles": {"actor": {"gpus": 8}}, "head": ON_REAL_NODE},
                       preflight={"resources": {"cpu": "500m", "memory": "1Gi"}})
        apply_job(real_node, namespace, body)
        # The chart's operator checks every 20 s once the pod has a Warning Event (the kubelet's Failed).
        condition = wait_object(real_node, "grpojobs", COLOCATED, namespace, _pods_not_ready, 120,
                                "PodsReady False for the preflight's image")
        assert condition["reason"] in ("ErrImagePull", "ImagePullBackOff")
        assert "(the preflight)" in condition["message"] and MISSING_IMAGE in condition["message"]
        wait_event(real_node, namespace, COLOCATED, condition["reason"])
    finally:
        delete_namespace(real_node, namespace, wait_for_jobs=True)
