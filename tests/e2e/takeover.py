"""A burst of GRPOJobs across a change of leader, and what every job must have afterwards: shared by the
out-of-cluster leader-election test (tests/e2e/test_leader_election.py, a leader killed with SIGKILL) and the
real-node one (tests/e2e/real/test_operator_pod.py, the leader's pod deleted)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kubeapi import ApiError
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import plan
from grpo_operator.render import NetworkPeers, render_children
from grpo_operator.render.common import JOB_LABEL

from .grpojobs import example
from .kube import get, items

EXAMPLE = "colocated-length"
# Every kind the operator may create for a job before training ends (the converter Job comes after it).
CHILD_KINDS = {"serviceaccounts": "ServiceAccount", "roles": "Role", "rolebindings": "RoleBinding",
               "configmaps": "ConfigMap", "persistentvolumeclaims": "PersistentVolumeClaim",
               "networkpolicies": "NetworkPolicy", "rayjobs": "RayJob", "jobs": "Job"}


def burst_job(index: int) -> dict[str, Any]:
    """A job whose children are all created and whose RayJob waits suspended: it holds no GPU, so a burst of
    them is judged by the operator's work alone, not by the fake nodes' capacity."""
    body = example(EXAMPLE, preflight={"enabled": False}, scheduling={"suspend": True})
    body["metadata"]["name"] = f"burst-{index:02d}"
    return body


def expected_children(body: dict[str, Any], namespace: str, network_policy: bool) -> Counter[str]:
    """The kinds, with counts, the operator's own renderer makes for `body`."""
    spec = GRPOJobSpec.model_validate(body["spec"])
    job_plan = plan(spec, name=body["metadata"]["name"], namespace=namespace, default_image="any")
    peers = NetworkPeers() if network_policy else None
    return Counter(child["kind"] for child in render_children(spec, job_plan, network_policy=peers))


def children_by_job(cluster: LocalCluster, namespace: str) -> dict[str, Counter[str]]:
    """Every object in `namespace` labelled with a job, counted by kind, per job."""
    found: dict[str, Counter[str]] = {}
    for resource, kind in CHILD_KINDS.items():  # a list's items carry no kind
        for obj in items(cluster, resource, "-n", namespace, "-l", JOB_LABEL):
            found.setdefault(obj["metadata"]["labels"][JOB_LABEL], Counter())[kind] += 1
    return found


def wrong_children(cluster: LocalCluster, namespace: str, bodies: list[dict[str, Any]],
                   network_policy: bool) -> dict[str, str]:
    """Jobs whose children are not exactly the rendered ones (a duplicate, a missing one), with what differs."""
    found = children_by_job(cluster, namespace)
    wrong = {}
    for body in bodies:
        name = body["metadata"]["name"]
        want, have = expected_children(body, namespace, network_policy), found.get(name, Counter())
        if want != have:
            wrong[name] = f"missing {dict(want - have)}, extra {dict(have - want)}"
    return wrong


def lease_holder(cluster: LocalCluster, namespace: str, lease: str) -> str:
    """Who holds the Lease; "" when nobody does, or before the first replica created it."""
    try:
        found = get(cluster, "lease", lease, "-n", namespace)
    except ApiError as exc:
        if exc.status == 404:
            return ""
        raise
    return (found.get("spec") or {}).get("holderIdentity") or ""


def phases(cluster: LocalCluster, namespace: str) -> dict[str, str | None]:
    return {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items(cluster, "grpojobs", "-n",
                                                                                        namespace)}
