"""Fixtures of the tests that run real pods on the real node: our images in its containerd, and the
operator installed by Helm as a pod there (instead of the session's out-of-cluster operator)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess
from grpo_devcluster.rehearsal_job import ON_REAL_NODE

from ..helm import Release, helm, install
from ..kube import delete_namespace, get, wait_for

OPERATOR_NAMESPACE = "grpo-system"
__all__ = ["ON_REAL_NODE", "OPERATOR_NAMESPACE", "NodeImages"]


@dataclass(frozen=True)
class NodeImages:
    operator: str
    trainer: str


@pytest.fixture(scope="session")
def real_node(cluster: LocalCluster) -> LocalCluster:
    if cluster.node is None:
        pytest.skip("the session's cluster runs without the real node (GRPO_DEVCLUSTER_REAL_NODE=0)")
    return cluster


@pytest.fixture(scope="session")
def node_images(real_node: LocalCluster) -> NodeImages:
    """The operator image and the trainer image (its rehearsal variant) built from our Dockerfiles with
    buildah and imported into the node's containerd; cached across runs by what goes into them."""
    built = real_node.load_node_images(("operator", "trainer"))
    return NodeImages(built["operator"], built["trainer"])


def _repository_and_tag(reference: str) -> tuple[str, str]:
    repository, _, tag = reference.rpartition(":")
    return repository, tag


@pytest.fixture(scope="package")
def operator_pod(real_node: LocalCluster, node_images: NodeImages, grpo_operator: OperatorProcess
                 ) -> Iterator[Release]:
    """`helm install` of the chart with the built operator image, its pod on the real node.

    The session's out-of-cluster operator is paused meanwhile: two operators would reconcile the same jobs.
    """
    grpo_operator.stop()
    repository, tag = _repository_and_tag(node_images.operator)
    release = install(
        real_node, "grpo", OPERATOR_NAMESPACE,
        f"image.repository={repository}", f"image.tag={tag}", "image.pullPolicy=Never",
        f"operator.defaultTrainerImage={node_images.trainer}",
        f"nodeSelector.{node_config.NODE_LABEL.replace('.', chr(92) + '.')}={node_config.NODE_LABEL_VALUE}",
        f"tolerations[0].key={node_config.NODE_TAINT['key']}", "tolerations[0].operator=Exists",
        "tolerations[0].effect=NoSchedule",
        timeout="240s",
    )
    try:
        yield release
    finally:
        helm(real_node, "uninstall", release.name, "-n", release.namespace, "--wait", check=False)
        wait_for("the operator pod gone", lambda: not get(real_node, "pods", "-n", release.namespace)["items"],
                 timeout=120)
        delete_namespace(real_node, release.namespace)
        grpo_operator.start()
