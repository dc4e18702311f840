"""Claims that cannot bind, said in the job's status instead of a silent Pending.

A ReadWriteMany claim on block storage (EBS, PD, Azure Disk), a StorageClass whose provisioner is not
installed, no default StorageClass: each leaves a PersistentVolumeClaim Pending forever, and with it
every pod that mounts it. The claim's Events say why; here they become a `ClaimsBound` condition
naming the claim, the spec field it comes from and the reason. Pure: the handlers read the claims and
their Events and write what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.reconcile.status import ConditionUpdate
from grpo_operator.runtime.kube import ClaimFacts

CONDITION = "ClaimsBound"
# A WaitForFirstConsumer claim binds once a pod that mounts it is scheduled: not a storage problem.
WAITING_FOR_POD = "WaitForFirstConsumer"
# A provisioner at work (the PV controller's Normal Events while it waits for one): a problem only once the claim
# has waited longer than the grace, since a missing provisioner says exactly the same, forever.
IN_PROGRESS = frozenset({"ExternalProvisioning", "Provisioning"})
HINT = (
    "the job's pods cannot start until it binds; see docs/troubleshooting.md#a-claim-does-not-bind "
    "(ReadWriteMany needs a shared-filesystem StorageClass)"
)


@dataclass(frozen=True)
class ClaimProblem:
    claim: str
    field: str
    reason: str
    message: str

    def describe(self) -> str:
        return f"PersistentVolumeClaim {self.claim} (spec.{self.field}) is not bound: {self.reason}: {self.message}"


def claims_of(spec: GRPOJobSpec, plan: Plan) -> dict[str, str]:
    """Every claim the job's pods mount -> the spec field it comes from (the first, when shared)."""
    named: list[tuple[str, str]] = [
        (plan.checkpoint_claim, "checkpoints.volume"),
        (spec.model.claim_name, "model.claimName"),
        (spec.data.claim_name, "data.claimName"),
    ]
    if spec.reward.model is not None:
        named.append((spec.reward.model.claim_name, "reward.model.claimName"))
    if spec.export.enabled and spec.export.target is not None:
        named.append((spec.export.target.claim_name, "export.target.claimName"))
    if plan.resume_from is not None:
        named.append((plan.resume_from.claim, "checkpoints.resumeFrom.claimName"))
    found: dict[str, str] = {}
    for claim, field in named:
        found.setdefault(claim, field)
    return found


def _when(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or
               (event.get("metadata") or {}).get("creationTimestamp") or "")


def unbound(claim: str, field: str, facts: ClaimFacts, events: Sequence[Mapping[str, Any]],
            waited: float = float("inf"), grace: float = 0.0) -> ClaimProblem | None:
    """The claim's problem from its phase and its newest Event; None when bound, merely waiting for a pod, or
    being provisioned (or not yet looked at) for less than `grace` seconds (`waited`: since its creation)."""
    if facts.phase == "Bound":
        return None
    latest = max(events, key=_when, default=None)
    in_progress = latest is None or (latest.get("reason") in IN_PROGRESS and latest.get("type") != "Warning")
    if in_progress and waited < grace:
        return None
    if latest is None:
        return ClaimProblem(claim, field, facts.phase, "no Events: nothing has tried to provision or bind it yet")
    if latest.get("reason") == WAITING_FOR_POD:
        return None
    return ClaimProblem(claim, field, str(latest.get("reason") or facts.phase), str(latest.get("message") or ""))


def storage_condition(problems: Sequence[ClaimProblem], reported: bool) -> ConditionUpdate | None:
    """ClaimsBound False with every problem; True once they are gone, only if False was reported before."""
    if problems:
        text = "; ".join(p.describe() for p in problems)
        return ConditionUpdate(CONDITION, "False", problems[0].reason, f"{text}; {HINT}")
    if reported:
        return ConditionUpdate(CONDITION, "True", "Bound", "every PersistentVolumeClaim the job mounts is bound")
    return None

