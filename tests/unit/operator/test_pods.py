"""Pods that cannot start become a PodsReady condition: the kubelet's and the scheduler's words, the pod's part."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from grpo_operator.reconcile.pods import (
    by_job_name,
    may_be_of,
    newest_claim_waits,
    newest_warnings,
    pod_problem,
    pod_warning_of,
    pods_condition,
)
from grpo_operator.reconcile.status import said_false


def _pod(role: str | None = None, component: str = "trainer", containers: list | None = None,
         conditions: list | None = None, phase: str = "Pending") -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": component, **({"grpo.dev/role": role} if role else {})}
    return {"metadata": {"name": "job-abcde-head-xyz12", "labels": labels},
            "status": {"phase": phase, "containerStatuses": containers or [], "conditions": conditions or []}}


def _waiting(reason: str, message: str) -> list[dict]:
    return [{"name": "ray-head", "state": {"waiting": {"reason": reason, "message": message}}}]


UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/6 nodes are available: 2 Insufficient nvidia.com/gpu."}]


def test_an_image_that_cannot_be_pulled_names_the_container_and_the_kubelets_message() -> None:
    problem = pod_problem(_pod("head", containers=_waiting("ErrImagePull", 'failed to pull "registry.invalid/x:1"')))
    assert problem is not None and problem.reason == "ErrImagePull" and problem.part == "the Ray head"
    assert problem.describe() == ('pod job-abcde-head-xyz12 (the Ray head): ErrImagePull: container ray-head: '
                                  'failed to pull "registry.invalid/x:1"')


def test_a_pod_no_node_takes_carries_the_schedulers_message() -> None:
    problem = pod_problem(_pod("actor", conditions=UNSCHEDULABLE))
    assert problem is not None and problem.reason == "Unschedulable" and problem.part == "the actor's Ray worker"
    assert "2 Insufficient nvidia.com/gpu" in problem.message


def test_passing_states_and_ended_pods_are_no_problem() -> None:
    assert pod_problem(_pod("head", containers=_waiting("ContainerCreating", ""))) is None
    assert pod_problem(_pod(component="preflight", containers=_waiting("CrashLoopBackOff", "x"),
                            phase="Failed")) is None
    crash = pod_problem(_pod(component="preflight", containers=_waiting("CrashLoopBackOff", "back-off 10s")))
    assert crash is not None and crash.part == "the preflight"


def test_waiting_for_nodes_an_autoscaler_may_add_is_not_a_failure() -> None:
    problem = pod_problem(_pod("actor", conditions=UNSCHEDULABLE))
    assert problem is not None
    waiting = pods_condition([problem], False, ["Karpenter NodePool gpu"])
    assert waiting is not None and (waiting.status, waiting.reason) == ("False", "WaitingForCapacity")
    assert waiting.message.startswith("waiting for nodes that Karpenter NodePool gpu may add: pod ")
    stuck = pods_condition([problem], False, [])
    assert stuck is not None and stuck.reason == "Unschedulable" and "troubleshooting" in stuck.message


def test_the_condition_clears_only_after_it_was_said() -> None:
    assert pods_condition([], False, []) is None
    cleared = pods_condition([], True, [])
    assert cleared is not None and (cleared.status, cleared.reason) == ("True", "Started")
    assert said_false({"conditions": [{"type": "PodsReady", "status": "False"}]}, "PodsReady")
    assert not said_false({"conditions": [{"type": "PodsReady", "status": "True"}]}, "PodsReady")


NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def test_a_warned_pod_may_be_the_jobs_by_its_name_while_its_warning_is_recent() -> None:
    assert may_be_of("job", by_job_name({"job-preflight-x1y2z": "2026-12-05T11:59:30Z"}), NOW)
    assert not may_be_of("job", by_job_name({"jobless-abcde": "2026-12-05T11:59:30Z",
                                             "other-job-head": "2026-12-05T11:59:30Z"}), NOW)
    # An hour-old warning of a pod that has run since: its Events stay, its problem does not.
    assert not may_be_of("job", by_job_name({"job-preflight-x1y2z": "2026-12-05T11:00:00Z"}), NOW)


def test_a_job_name_with_dashes_finds_its_pods_and_the_newest_warning_of_any_of_them_counts() -> None:
    warned = by_job_name({"my-job-raycluster-abc-head-x": "2026-12-05T11:00:00Z",
                          "my-job-raycluster-abc-actor-worker-y": "2026-12-05T11:59:30Z"})
    assert may_be_of("my-job", warned, NOW)
    assert may_be_of("my", warned, NOW)  # as startswith("my-") did: the pod's labels decide once it is read
    assert not may_be_of("my-jo", warned, NOW)
    assert not may_be_of("my-job-raycluster-abc-actor-worker-y", warned, NOW)  # the pod's own whole name


def test_a_pod_unschedulable_for_a_moment_or_for_its_claims_is_not_said() -> None:
    def unschedulable(message: str, since: str) -> dict[str, Any]:
        return _pod("actor", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                          "message": message, "lastTransitionTime": since}])

    assert pod_problem(unschedulable("0/6 nodes are available", "2026-12-05T11:59:50Z"), NOW) is None  # 10 s
    assert pod_problem(unschedulable("0/6 nodes are available", "2026-12-05T11:59:00Z"), NOW) is not None
    claims = "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: ..."
    assert pod_problem(unschedulable(claims, "2026-12-05T11:00:00Z"), NOW) is None  # ClaimsBound's to say


def test_the_newest_warning_of_each_pod_leaves_out_waits_for_unbound_claims() -> None:
    def event(pod: str, when: str, message: str) -> dict[str, Any]:
        return {"involvedObject": {"kind": "Pod", "name": pod}, "lastTimestamp": when, "message": message}

    events = [event("a", "2026-12-05T11:58:00Z", "Back-off pulling image"),
              event("a", "2026-12-05T11:59:00Z", "Back-off pulling image"),
              event("b", "2026-12-05T11:59:00Z", "0/6 nodes are available: pod has unbound immediate "
                                                 "PersistentVolumeClaims. preemption: 0/6 nodes are available")]
    assert newest_warnings(map(pod_warning_of, events)) == {"a": "2026-12-05T11:59:00Z"}


# The scheduler's words for a head whose actor is not placed yet, and for one that the actor's node cannot take.
WAITS_FOR_ITS_ACTOR = ("0/250 nodes are available: 250 node(s) didn't match pod affinity rules. no new claims to "
                       "deallocate, preemption: 0/250 nodes are available: 250 Preemption is not helpful for "
                       "scheduling.")
ACTORS_NODE_FULL = ("0/6 nodes are available: 1 Insufficient cpu, 5 node(s) didn't match pod affinity rules. "
                    "preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.")


def test_a_head_waiting_for_its_actor_to_be_placed_is_no_warning_of_its_own() -> None:
    def event(pod: str, message: str) -> dict[str, Any]:
        return {"involvedObject": {"kind": "Pod", "name": pod}, "lastTimestamp": "2026-12-05T11:59:00Z",
                "message": message}

    events = [event("job-head", WAITS_FOR_ITS_ACTOR), event("other-head", ACTORS_NODE_FULL)]
    assert newest_warnings(map(pod_warning_of, events)) == {"other-head": "2026-12-05T11:59:00Z"}


def test_a_head_unschedulable_only_for_its_actor_is_not_said_but_one_the_actors_node_cannot_take_is() -> None:
    def head(message: str) -> dict[str, Any]:
        return _pod("head", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": message, "lastTransitionTime": "2026-12-05T11:00:00Z"}])

    assert pod_problem(head(WAITS_FOR_ITS_ACTOR), NOW) is None
    problem = pod_problem(head(ACTORS_NODE_FULL), NOW)
    assert problem is not None and problem.reason == "Unschedulable"


def test_claim_waits_are_told_apart_from_the_problems_of_pods() -> None:
    events = [
        {"involvedObject": {"name": "job-a"}, "lastTimestamp": "2026-12-05T11:59:00Z",
         "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: ..."},
        {"involvedObject": {"name": "job-a"}, "lastTimestamp": "2026-12-05T11:59:30Z",
         "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: ..."},
        {"involvedObject": {"name": "job-b"}, "lastTimestamp": "2026-12-05T11:59:40Z",
         "message": "Failed to pull image \"trainer:missing\""},
    ]
    warnings = [pod_warning_of(e) for e in events]
    assert newest_claim_waits(warnings) == {"job-a": "2026-12-05T11:59:30Z"}
    assert newest_warnings(warnings) == {"job-b": "2026-12-05T11:59:40Z"}
