"""A real local multi-node Ray cluster (ray.cluster_utils) with fake GPUs and role resources, as the job's
pods advertise them, for the tests of role placement and of the rehearsal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def ray_nodes(head: dict[str, Any], nodes: list[dict[str, Any]]) -> Iterator[Any]:
    """The head (`head`: its add_node arguments) and `nodes`; yields the cluster, shut down afterwards."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "include_dashboard": False,
            # CI machines are small and shared: a raylet starved for a few seconds must not be
            # declared dead (which drops its node and leaves a pool unplaceable)
            "_system_config": {"health_check_failure_threshold": 60, "health_check_timeout_ms": 10000},
            **head,
        },
    )
    for node in nodes:
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
