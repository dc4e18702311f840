"""Pods that cannot start, said in the job's status instead of a job that sits in Preflight or Pending.

An image that cannot be pulled, a pod no node can take, a container that crashes at start: each leaves the job
waiting with nothing on the GRPOJob to say why, until a deadline ends it. The pod's own status says why (the
kubelet's waiting reason and message, the scheduler's PodScheduled condition); here it becomes a `PodsReady`
condition naming the pod's part in the job and the reason, and an Event. A pod that waits for nodes an autoscaler
may add is not a failure: `WaitingForCapacity`, with the scheduler's message and the NodePools that may add them.

Pure: the handlers read the pods (only those of jobs that have Warning Events) and write what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from grpo_operator.reconcile.status import ConditionUpdate, seconds_since
from grpo_operator.render.common import COMPONENT_LABEL, ROLE_LABEL

CONDITION = "PodsReady"
# The kubelet's waiting reasons that do not pass by themselves (a container merely being created does).
STUCK = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CrashLoopBackOff",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})
UNSCHEDULABLE = "Unschedulable"
# A pod that waits for its claims to bind is unschedulable until they do: ClaimsBound says that, not PodsReady.
_UNBOUND_CLAIMS = "unbound immediate PersistentVolumeClaims"
# How long a pod may be unschedulable before it is said: in a burst the scheduler tries pods before their claims
# or nodes are there, and a FailedScheduling that passes in seconds is no problem to report.
UNSCHEDULABLE_GRACE_SECONDS = 30.0
# Warnings older than this are of the past: a problem that lasts repeats its Warning (the kubelet's back-off, the
# scheduler's retries), so only the jobs with recent ones have their pods read.
RECENT_WARNING_SECONDS = 120.0
WAITING_FOR_CAPACITY = "WaitingForCapacity"
HINT = "see docs/troubleshooting.md#pods-do-not-start"
_PARTS = {"preflight": "the preflight", "submitter": "KubeRay's submitter", "export": "the converter"}


@dataclass(frozen=True)
class PodProblem:
    pod: str
    part: str
    reason: str
    message: str
    role: str = ""  # the Ray role of the pod (head, actor, ...); empty for the Jobs' pods

    def describe(self) -> str:
        return f"pod {self.pod} ({self.part}): {self.reason}: {self.message}"


def part_of(pod: Mapping[str, Any]) -> str:
    """What the pod is to the job, in words: the preflight, the Ray head, the actor's Ray worker, ..."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    role = labels.get(ROLE_LABEL)
    if role == "head":
        return "the Ray head"
    if role:
        return f"the {role}'s Ray worker"
    return _PARTS.get(labels.get(COMPONENT_LABEL, ""), "a pod of the job")


def pod_problem(pod: Mapping[str, Any], now: datetime | None = None) -> PodProblem | None:
    """The pod's own account of why it does not run: a container stuck waiting, or no node for it for longer than
    UNSCHEDULABLE_GRACE_SECONDS (not for want of a bound claim: ClaimsBound says that)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    name, part = str(meta.get("name", "")), part_of(pod)
    role = str((meta.get("labels") or {}).get(ROLE_LABEL, ""))
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK:
            message = f"container {container.get('name')}: {waiting.get('message') or waiting['reason']}"
            return PodProblem(name, part, str(waiting["reason"]), message, role)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == UNSCHEDULABLE:
            message = str(condition.get("message") or "no node can take it")
            if _UNBOUND_CLAIMS in message:
                return None
            since = seconds_since(str(condition.get("lastTransitionTime") or ""), now or datetime.now(UTC))
            if since < UNSCHEDULABLE_GRACE_SECONDS:
                return None
            return PodProblem(name, part, UNSCHEDULABLE, message, role)
    return None


def pods_condition(problems: Sequence[PodProblem], reported: bool,
                   autoscalers: Sequence[str]) -> ConditionUpdate | None:
    """PodsReady False with every problem (WaitingForCapacity when only nodes are missing and `autoscalers` may add
    them); True once they are gone, only if False was reported before."""
    if problems:
        text = "; ".join(p.describe() for p in problems)
        if autoscalers and all(p.reason == UNSCHEDULABLE for p in problems):
            return ConditionUpdate(CONDITION, "False", WAITING_FOR_CAPACITY,
                                   f"waiting for nodes that {', '.join(autoscalers)} may add: {text}")
        return ConditionUpdate(CONDITION, "False", problems[0].reason, f"{text}; {HINT}")
    if reported:
        return ConditionUpdate(CONDITION, "True", "Started", "every pod of the job was scheduled and started")
    return None


def newest_warnings(events: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> the time of its newest Warning, leaving out the scheduler's waits for unbound claims: in a
    burst every pod may get one before its claims bind, and ClaimsBound speaks for claims."""
    newest: dict[str, str] = {}
    for event in events:
        if _UNBOUND_CLAIMS in str(event.get("message") or ""):
            continue
        name = str((event.get("involvedObject") or {}).get("name", ""))
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if when > newest.get(name, ""):
            newest[name] = when
    return newest


def may_be_of(job: str, warned: Mapping[str, str], now: datetime | None = None) -> bool:
    """Whether a pod with a recent Warning (`warned`: pod name -> its newest Warning's time) could be one of the job's:
    every pod of the job is named after it (the preflight and converter Jobs', the RayJob's submitter and RayCluster);
    its labels decide once it is read."""
    return any(name.startswith(f"{job}-") and seconds_since(when, now or datetime.now(UTC)) < RECENT_WARNING_SECONDS
               for name, when in warned.items())
