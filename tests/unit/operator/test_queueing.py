"""A queued job's children that Kueue has not admitted: Kueue's own reason and message, on the GRPOJob."""

from __future__ import annotations

from typing import Any

from grpo_operator.reconcile.queueing import owners_of, queue_condition, waiting_workloads
from grpojob_fixtures import example_body, plan_of, spec_with

OWNERS = owners_of(plan_of(spec_with(example_body("colocated-length")), "job"))


def _workload(kind: str, name: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"kind": kind, "name": name}]}, "status": {"conditions": list(conditions)}}


PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set gpu: insufficient unused quota for nvidia.com/gpu in "
                      "flavor default-flavor, 8 more needed"}


def test_a_rayjob_waiting_for_quota_is_said_with_kueues_message() -> None:
    waiting = waiting_workloads([_workload("RayJob", "job", PENDING)], OWNERS)
    condition = queue_condition(waiting, "team-a", False)
    assert condition is not None and (condition.status, condition.reason) == ("False", "Pending")
    assert condition.message == ("the training RayJob waits in Kueue's LocalQueue team-a: Pending: couldn't assign "
                                 "flavors to pod set gpu: insufficient unused quota for nvidia.com/gpu in flavor "
                                 "default-flavor, 8 more needed")


def test_admitted_finished_and_other_jobs_workloads_are_not_waiting() -> None:
    admitted = _workload("Job", "job-preflight", {"type": "Admitted", "status": "True"})
    finished = _workload("RayJob", "job", PENDING, {"type": "Finished", "status": "True"})
    other = _workload("RayJob", "another-job", PENDING)
    assert waiting_workloads([admitted, finished, other], OWNERS) == []
    assert queue_condition([], "team-a", False) is None
    cleared = queue_condition([], "team-a", True)
    assert cleared is not None and (cleared.status, cleared.reason) == ("True", "Admitted")

