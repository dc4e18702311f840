"""A claim that cannot bind becomes a ClaimsBound condition naming the claim, its field and the reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.reconcile.status import said_false, seconds_since
from grpo_operator.reconcile.storage import (
    claims_of,
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
