"""A job queued in Kueue (spec.scheduling.queueName): what Kueue says about it, on the GRPOJob.

Kueue admits the job's RayJob, and its preflight and converter Jobs, each as a Workload of their own. While one of
them waits for quota (its RayJob or Job stays suspended, with no pod to tell anything), Kueue's Workload says why:
"couldn't assign flavors to pod set gpu: insufficient unused quota for nvidia.com/gpu in flavor default, 8 more
needed", or a LocalQueue that does not exist. That becomes a `QueueAdmitted` condition naming the child; True once
every Workload of the job is admitted, when False was said before.

Pure: the handlers list the namespace's Workloads and call these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_operator.plan import Plan
from grpo_operator.reconcile.status import ConditionUpdate

CONDITION = "QueueAdmitted"


@dataclass(frozen=True)
class Waiting:
    owner: str  # "RayJob x", "Job x-preflight"
    reason: str
    message: str


def owners_of(plan: Plan) -> dict[tuple[str, str], str]:
    """(kind, name) of every child Kueue admits -> its part of the job, in words."""
    return {
        ("RayJob", plan.names.rayjob): "the training RayJob",
        ("Job", plan.names.preflight_job): "the preflight Job",
        ("Job", plan.names.export_job): "the converter Job",
    }


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def waiting_workloads(workloads: Sequence[Mapping[str, Any]], owners: Mapping[tuple[str, str], str]) -> list[Waiting]:
    """The job's Workloads that Kueue has not admitted, with Kueue's reason and message (finished ones left out)."""
    found = []
    for workload in workloads:
        refs = (workload.get("metadata") or {}).get("ownerReferences") or []
        part = next((owners[(r.get("kind"), r.get("name"))] for r in refs
                     if (r.get("kind"), r.get("name")) in owners), None)
        if part is None or _condition(workload, "Finished").get("status") == "True":
            continue
        if _condition(workload, "Admitted").get("status") == "True":
            continue
        reserved = _condition(workload, "QuotaReserved")
        found.append(Waiting(part, str(reserved.get("reason") or "Pending"),
                             str(reserved.get("message") or "not yet looked at by Kueue")))
    return found


def queue_condition(waiting: Sequence[Waiting], queue: str, reported: bool) -> ConditionUpdate | None:
    """QueueAdmitted False while a Workload of the job waits; True once none does, only if False was said."""
    if waiting:
        text = "; ".join(f"{w.owner} waits in Kueue's LocalQueue {queue}: {w.reason}: {w.message}" for w in waiting)
        return ConditionUpdate(CONDITION, "False", waiting[0].reason, text)
    if reported:
        return ConditionUpdate(CONDITION, "True", "Admitted", f"Kueue admitted the job from LocalQueue {queue}")
    return None

