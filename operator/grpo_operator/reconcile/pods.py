"""Pods that cannot start, said in the job's status instead of a job that sits in Preflight or Pending.

An image that cannot be pulled, a pod no node can take, a container that crashes at start: each leaves the job
waiting with nothing on the GRPOJob to say why, until a deadline ends it. The pod's own status says why (the
kubelet's waiting reason and message, the scheduler's PodScheduled condition); here it becomes a `PodsReady`
condition naming the pod's part in the job and the reason, and an Event. A pod that waits for nodes an autoscaler
may add is not a failure: `WaitingForCapacity`, with the scheduler's message and the NodePools that may add them.

Pure: the handlers read the pods (only those of jobs that have Warning Events) and write what this returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
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
# The head of a job on a ReadWriteOnce checkpoint claim follows the actor pod onto its node (render/rayjob.py); until
# the actor is placed, every node fails the head's pod affinity and nothing else. That is the head waiting its turn:
# whatever holds the actor up is in the actor's own Warning. The scheduler lists each reason with its node count,
# so the affinity is the only one when it directly follows "nodes are available: N node(s)" and ends the list.
_WAITING_FOR_ITS_ACTOR = re.compile(r"nodes are available: \d+ node\(s\) didn't match pod affinity rules\.")
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
    UNSCHEDULABLE_GRACE_SECONDS (not for want of a bound claim, nor a head's for its actor's placement: only_waits)."""
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
            if only_waits(message):
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


def only_waits(message: str) -> bool:
    """A scheduler's message that says the pod waits for something other than nodes: its claims to bind (ClaimsBound
    says so), or a head for its actor to be placed (the actor's own Warning says why it is not)."""
    return _UNBOUND_CLAIMS in message or _WAITING_FOR_ITS_ACTOR.search(message) is not None


@dataclass(frozen=True)
class PodWarning:
    """What the waiting check keeps of a pod's Warning Event: whose, when, and what it says of the pod."""

    pod: str
    when: str
    waits_only: bool  # the scheduler's word that it waits for something other than nodes (`only_waits`)
    waits_for_claims: bool


def pod_warning_of(event: Mapping[str, Any]) -> PodWarning:
    message = str(event.get("message") or "")
    return PodWarning(str((event.get("involvedObject") or {}).get("name", "")),
                      str(event.get("lastTimestamp") or event.get("eventTime") or ""),
                      only_waits(message), _UNBOUND_CLAIMS in message)


def newest_warnings(warnings: Iterable[PodWarning]) -> dict[str, str]:
    """Pod name -> the time of its newest Warning, leaving out the scheduler's waits (`only_waits`): in a burst every
    pod may get one before its claims bind, and every head one before its actor is placed; reading the pods of each
    such job every check period was most of a 1000-job burst's requests (bench/operator/RESULTS.md, issue 34)."""
    return _newest(w for w in warnings if not w.waits_only)


def newest_claim_waits(warnings: Iterable[PodWarning]) -> dict[str, str]:
    """Pod name -> the time of its newest Warning that it waits for its claims to bind: the claims' check looks at
    the claims of such a pod's job again, even where it had seen them all bound (a claim deleted and made again)."""
    return _newest(w for w in warnings if w.waits_for_claims)


def _newest(warnings: Iterable[PodWarning]) -> dict[str, str]:
    newest: dict[str, str] = {}
    for warning in warnings:
        if warning.when > newest.get(warning.pod, ""):
            newest[warning.pod] = warning.when
    return newest


def by_job_name(warned: Mapping[str, str]) -> dict[str, str]:
    """Pod name -> newest Warning's time, turned into: each name a job's pods could have been named after (every
    part of a pod's name before a "-") -> the newest Warning of those pods. Built once per list of Warnings, so
    that asking about one job is a lookup: with 1000 jobs waiting and 400 warned pods, scanning every pod name for
    each job's check was most of that check's CPU (bench/operator/RESULTS.md, issue 34)."""
    newest: dict[str, str] = {}
    for name, when in warned.items():
        for cut in (i for i, char in enumerate(name) if char == "-"):
            prefix = name[:cut]
            if when > newest.get(prefix, ""):
                newest[prefix] = when
    return newest


def may_be_of(job: str, warned_by_job_name: Mapping[str, str], now: datetime | None = None) -> bool:
    """Whether a pod with a recent Warning (`warned_by_job_name`: `by_job_name` of the pods' newest Warnings) could be
    one of the job's: every pod of the job is named after it (the preflight and converter Jobs', the RayJob's
    submitter and RayCluster); its labels decide once it is read."""
    when = warned_by_job_name.get(job)
    return when is not None and seconds_since(when, now or datetime.now(UTC)) < RECENT_WARNING_SECONDS
