"""A pod of the job that cannot start reaches the GRPOJob within a check period: a PodsReady condition naming the
pod's part and the kubelet's or the scheduler's words, and an Event. Before, the job sat in Pending (or Preflight)
with nothing to say until a deadline ended it (issue 30, failure 6).

The image that cannot be pulled is real on the real node (tests/e2e/real/test_pod_problems.py); here KWOK plays the
kubelet's CrashLoopBackOff (kwok_config.CRASH_ANNOTATION), and the scheduler is the real one
(tests/e2e/cloud for a pod no node takes).
"""

from __future__ import annotations

from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import CRASH_ANNOTATION

from .example_runs import COLOCATED
from .grpojobs import apply_job, example
from .kube import wait_event, wait_object


def _pods_ready(job: dict | None) -> dict | None:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodsReady" and c["status"] == "False"), None)


def test_a_crashing_head_is_said_on_the_job_with_the_kubelets_reason(cluster: LocalCluster, team_ns: str) -> None:
    apply_job(cluster, team_ns, example("colocated-length", podMetadata={"annotations": {CRASH_ANNOTATION: "head"}}))
    condition = wait_object(cluster, "grpojobs", COLOCATED, team_ns, _pods_ready, 60, "PodsReady False")
    assert condition["reason"] == "CrashLoopBackOff"
    assert "(the Ray head): CrashLoopBackOff: container ray-head: back-off 40s" in condition["message"]
    event = wait_event(cluster, team_ns, COLOCATED, "CrashLoopBackOff")
    assert event["message"] == condition["message"]
