"""A claim that cannot bind becomes a ClaimsBound condition naming the claim, its field and the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.reconcile.status import said_false, seconds_since
from grpo_operator.reconcile.storage import (
    BACKLOG_GRACES,
    binding_progress,
    claims_of,
    events_of_claim,
    provisioning_wait,
    storage_condition,
    unbound,
)
from grpo_operator.runtime.kube import ClaimFacts, claim_facts_of

PENDING = ClaimFacts(("ReadWriteMany",), "Pending")


def _event(reason: str, message: str, at: str, kind: str = "Warning") -> dict[str, Any]:
    return {"type": kind, "reason": reason, "message": message, "lastTimestamp": at}


def test_every_mounted_claim_is_watched_with_its_field(reference: tuple[GRPOJobSpec, Plan]) -> None:
    assert claims_of(*reference) == {
        "qwen2-7b-reference-checkpoints": "checkpoints.volume",
        "models": "model.claimName",  # the reward model shares it: named once, by its first field
        "datasets": "data.claimName",
        "exports": "export.target.claimName",
    }


def test_the_newest_event_says_why(reference: tuple[GRPOJobSpec, Plan]) -> None:
    events = [
        _event("ExternalProvisioning", "Waiting for a volume to be created by ebs.csi.aws.com", "2026-01-01T00:00:01Z",
               kind="Normal"),
        _event("ProvisioningFailed", "failed to provision volume: access mode ReadWriteMany not supported",
               "2026-01-01T00:00:05Z"),
    ]
    problem = unbound("qwen2-7b-reference-checkpoints", "checkpoints.volume", PENDING, events)
    assert problem is not None
    assert problem.reason == "ProvisioningFailed"
    condition = storage_condition([problem], reported=False)
    assert condition is not None and (condition.type, condition.status) == ("ClaimsBound", "False")
    assert condition.reason == "ProvisioningFailed"
    assert "PersistentVolumeClaim qwen2-7b-reference-checkpoints (spec.checkpoints.volume) is not bound" in (
        condition.message)
    assert "access mode ReadWriteMany not supported" in condition.message


def test_a_claim_waiting_for_its_pod_or_bound_is_no_problem() -> None:
    waiting = [_event("WaitForFirstConsumer", "waiting for first consumer to be created before binding",
                      "2026-01-01T00:00:01Z", kind="Normal")]
    assert unbound("c", "data.claimName", PENDING, waiting) is None
    assert unbound("c", "data.claimName", ClaimFacts(("ReadWriteOnce",), "Bound"), []) is None


def test_a_claim_nobody_acted_on_says_so() -> None:
    problem = unbound("c", "model.claimName", PENDING, [])
    assert problem is not None and "nothing has tried to provision or bind it" in problem.message


def test_the_condition_turns_true_only_after_it_was_false() -> None:
    assert storage_condition([], reported=False) is None  # no write at all for jobs that never had a problem
    resolved = storage_condition([], reported=True)
    assert resolved is not None and (resolved.status, resolved.reason) == ("True", "Bound")
    assert said_false({"conditions": [{"type": "ClaimsBound", "status": "False"}]}, "ClaimsBound")
    assert not said_false({"conditions": [{"type": "Ready", "status": "False"}]}, "ClaimsBound")


def test_claim_facts_are_read_from_the_claim() -> None:
    claim = {"spec": {"accessModes": ["ReadWriteOnce"]}, "status": {"phase": "Bound"}}
    assert claim_facts_of(claim) == ClaimFacts(("ReadWriteOnce",), "Bound", "")
    claim["spec"]["storageClassName"] = "standard-rwo"
    assert claim_facts_of(claim).storage_class == "standard-rwo"
    assert claim_facts_of({"spec": {}}) == ClaimFacts((), "Pending")


def test_a_claim_being_provisioned_is_reported_only_after_the_grace() -> None:
    provisioning = [_event("ExternalProvisioning", "waiting for a volume to be created by the external provisioner "
                           "'ebs.csi.aws.com'", "2026-01-01T00:00:01Z", kind="Normal")]
    assert unbound("c", "checkpoints.volume", PENDING, provisioning, waited=30, grace=120) is None
    assert unbound("c", "checkpoints.volume", PENDING, [], waited=30, grace=120) is None  # nobody has looked yet
    late = unbound("c", "checkpoints.volume", PENDING, provisioning, waited=121, grace=120)
    assert late is not None and late.reason == "ExternalProvisioning" and "ebs.csi.aws.com" in late.message


def test_a_failure_is_reported_at_once_within_the_grace() -> None:
    failed = [_event("ProvisioningFailed", "access mode ReadWriteMany not supported", "2026-01-01T00:00:02Z"),
              _event("ExternalProvisioning", "waiting", "2026-01-01T00:00:01Z", kind="Normal")]
    problem = unbound("c", "checkpoints.volume", PENDING, failed, waited=5, grace=120)
    assert problem is not None and problem.reason == "ProvisioningFailed"


def test_a_claims_wait_is_counted_from_its_creation() -> None:
    now = datetime(2026, 1, 1, 0, 2, 0, tzinfo=UTC)
    assert seconds_since("2026-01-01T00:00:30Z", now) == 90
    assert seconds_since("", now) == float("inf")


START = datetime(2026, 1, 1, tzinfo=UTC)


def _claim(phase: str, storage_class: str = "std", created: str = "2026-01-01T00:00:00Z") -> ClaimFacts:
    return ClaimFacts(("ReadWriteOnce",), phase, created, storage_class)


def _asked(at: str) -> list[dict[str, Any]]:
    event = _event("ExternalProvisioning", "waiting for a volume to be created by the external provisioner",
                   "2026-01-01T01:00:00Z", kind="Normal")
    return [{**event, "firstTimestamp": at}]


def test_a_class_that_binds_more_claims_than_at_the_look_before_is_at_work() -> None:
    first = binding_progress(None, {"a": _claim("Bound"), "b": _claim("Pending")}, START)
    assert first.bound == {"std": 1} and first.grew_since == {}  # bound before anyone looked: no date to give it
    later = START + timedelta(seconds=20)
    second = binding_progress(first, {"a": _claim("Bound"), "b": _claim("Bound"), "c": _claim("Pending", "nfs")},
                              later)
    assert second.grew_since == {"std": START}, "dated at the look before: the earliest the bind can have been"
    # A bound claim deleted is no progress of its class (std); a claim bound in another class is, for that class.
    third = binding_progress(second, {"b": _claim("Bound"), "c": _claim("Bound", "nfs")}, later + timedelta(20))
    assert third.grew_since == {"std": START, "nfs": later}


def test_a_claim_behind_a_provisioner_at_work_is_not_reported_after_the_grace() -> None:
    now = START + timedelta(seconds=300)
    claim, events = _claim("Pending"), _asked("2026-01-01T00:00:00Z")
    assert provisioning_wait(claim, events, None, now, grace=120) == 300
    working = binding_progress(binding_progress(None, {}, now - timedelta(seconds=30)),
                               {"other": _claim("Bound")}, now)
    waited = provisioning_wait(claim, events, working, now, grace=120)
    assert waited == 30 and unbound("c", "checkpoints.volume", claim, events, waited, grace=120) is None
    # Other classes' progress says nothing of this claim's provisioner.
    elsewhere = binding_progress(binding_progress(None, {}, now - timedelta(seconds=30)),
                                 {"other": _claim("Bound", "nfs")}, now)
    waited = provisioning_wait(claim, events, elsewhere, now, grace=120)
    assert waited == 300 and unbound("c", "checkpoints.volume", claim, events, waited, grace=120) is not None


def test_a_backlog_is_waited_for_at_most_ten_graces() -> None:
    now = START + timedelta(seconds=BACKLOG_GRACES * 120)
    working = binding_progress(binding_progress(None, {}, now - timedelta(seconds=5)), {"o": _claim("Bound")}, now)
    waited = provisioning_wait(_claim("Pending"), _asked("2026-01-01T00:00:00Z"), working, now, grace=120)
    assert waited == BACKLOG_GRACES * 120


def test_a_wait_for_first_consumer_claim_waits_from_when_its_pod_asked() -> None:
    # Created at 00:00, its pod got a node at 00:10, when the provisioner was first asked for a volume.
    events = [_event("WaitForFirstConsumer", "waiting for first consumer to be created before binding",
                     "2026-01-01T00:09:00Z", kind="Normal"), *_asked("2026-01-01T00:10:00Z")]
    now = START + timedelta(minutes=11)
    assert provisioning_wait(_claim("Pending"), events, None, now, grace=120) == 60
    assert provisioning_wait(_claim("Pending"), [], None, now, grace=120) == 660  # its Events expired: its creation


def test_the_events_of_a_claim_made_again_under_its_name_are_not_the_ones_before() -> None:
    old = {**_asked("2026-01-01T00:00:00Z")[0], "claimUid": "old"}
    new = {**_asked("2026-01-01T00:30:00Z")[0], "claimUid": "new"}
    failed_before = {**_event("ProvisioningFailed", "quota", "2026-01-01T00:10:00Z"), "claimUid": "old"}
    claim = ClaimFacts(("ReadWriteOnce",), "Pending", "2026-01-01T00:30:00Z", "std", uid="new")
    events = events_of_claim(claim, [old, failed_before, new])
    assert events == [new]
    now = START + timedelta(minutes=31)
    assert provisioning_wait(claim, events, None, now, grace=120) == 60
    assert unbound("c", "checkpoints.volume", claim, events, 60, grace=120) is None  # not the old one's failure
    # Without uids (an Event that names none, a claim not known by uid) every Event of the name counts.
    assert events_of_claim(ClaimFacts(("ReadWriteOnce",), "Pending"), [old, new]) == [old, new]
