"""Claims that cannot bind, said in the job's status instead of a silent Pending.

A ReadWriteMany claim on block storage (EBS, PD, Azure Disk), a StorageClass whose provisioner is not
installed, no default StorageClass: each leaves a PersistentVolumeClaim Pending forever, and with it
every pod that mounts it. The claim's Events say why; here they become a `ClaimsBound` condition
naming the claim, the spec field it comes from and the reason. Pure: the handlers read the claims and
their Events and write what this returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.reconcile.status import ConditionUpdate, seconds_since
from grpo_operator.runtime.kube import ClaimFacts

CONDITION = "ClaimsBound"
# A WaitForFirstConsumer claim binds once a pod that mounts it is scheduled: not a storage problem.
WAITING_FOR_POD = "WaitForFirstConsumer"
# A provisioner at work (the PV controller's Normal Events while it waits for one): a problem only once the claim
# has waited longer than the grace, since a missing provisioner says exactly the same, forever.
IN_PROGRESS = frozenset({"ExternalProvisioning", "Provisioning"})
# A provisioner that keeps binding other claims of the class is working through a backlog: a claim still waiting for
# it is reported once the provisioner has bound none for a grace, or at the latest this many graces after it asked.
BACKLOG_GRACES = 10
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


def _when(event: Mapping[str, Any], first: str = "lastTimestamp") -> str:
    """The Event's time: `first` (its last or its first occurrence), else when it was recorded."""
    return str(event.get(first) or event.get("eventTime") or
               (event.get("metadata") or {}).get("creationTimestamp") or "")


@dataclass(frozen=True)
class BindingProgress:
    """A namespace's claims at one look, per StorageClass: how many were bound, and since when a look found more bound
    than the look before (the class's provisioner at work)."""

    at: datetime
    bound: Mapping[str, int]
    grew_since: Mapping[str, datetime]


def binding_progress(previous: BindingProgress | None, claims: Mapping[str, ClaimFacts],
                     now: datetime) -> BindingProgress:
    """This look's progress: a class with more claims bound than at the previous look bound one since then (dated at
    the previous look, the earliest it can have been: a claim is then reported no later than it should be). Claims
    deleted may hide a bind; never the other way round."""
    bound = Counter(f.storage_class for f in claims.values() if f.phase == "Bound")
    grew = dict(previous.grew_since) if previous is not None else {}
    if previous is not None:
        for storage_class, count in bound.items():
            if count > previous.bound.get(storage_class, 0):
                grew[storage_class] = previous.at
    return BindingProgress(now, dict(bound), grew)


def events_of_claim(facts: ClaimFacts, events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Events about this very claim: a job deleted and applied again makes its checkpoint claim again under the
    same name, and the Events of the one before (kept an hour) would date its ask, or give its reason, too early.
    An Event that names no uid (`claimUid`), or a claim whose uid is not known, is taken as the claim's."""
    if not facts.uid:
        return list(events)
    return [e for e in events if e.get("claimUid", facts.uid) == facts.uid]


def _first_asked(events: Sequence[Mapping[str, Any]]) -> str:
    """When the claim's provisioning was first asked for: its oldest in-progress Event's first time ("" if none)."""
    times = [_when(e, "firstTimestamp") for e in events
             if e.get("reason") in IN_PROGRESS and e.get("type") != "Warning"]
    return min((t for t in times if t), default="")


def provisioning_wait(facts: ClaimFacts, events: Sequence[Mapping[str, Any]], progress: BindingProgress | None,
                      now: datetime, grace: float) -> float:
    """Seconds the claim has waited on a provisioner that shows no sign of work. From when its provisioning was first
    asked for: a WaitForFirstConsumer claim is asked for once its pod has a node, which may be long after its creation
    (the claim's creation when its Events have expired). While other claims of its StorageClass in the namespace keep
    binding, from the last look that found one newly bound instead, up to `BACKLOG_GRACES` graces after the ask: a
    thousand claims at once keep a working provisioner busy longer than the grace, and only a missing or stuck one
    says the same forever."""
    asked = seconds_since(_first_asked(events) or facts.created, now)
    grew = progress.grew_since.get(facts.storage_class) if progress is not None else None
    if grew is None or asked >= BACKLOG_GRACES * grace:
        return asked
    return min(asked, (now - grew).total_seconds())


def unbound(claim: str, field: str, facts: ClaimFacts, events: Sequence[Mapping[str, Any]],
            waited: float = float("inf"), grace: float = 0.0) -> ClaimProblem | None:
    """The claim's problem from its phase and its newest Event; None when bound, merely waiting for a pod, or
    being provisioned (or not yet looked at) for less than `grace` seconds (`waited`: `provisioning_wait`)."""
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

