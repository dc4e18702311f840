"""The waiting check's view of a job (reconcile/binding.py): read like the job's status, parsed once per version."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from grpo_operator.reconcile import binding, pods, waiting_lists
from grpo_operator.reconcile.common import conditions_hold
from grpo_operator.reconcile.status import ConditionUpdate, said_false
from grpo_operator.runtime import kube
from grpo_operator.runtime.job_cache import JobCache


def _job(revision: int, conditions: list[dict[str, Any]], phase: str = "Pending") -> dict[str, Any]:
    return {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPOJob",
            "metadata": {"namespace": "ns", "name": "job", "uid": "u1", "generation": 1,
                         "resourceVersion": str(revision)},
            "spec": {}, "status": {"phase": phase, "conditions": conditions}}


CONDITIONS = [
    {"type": "Ready", "status": "False", "reason": "Initializing", "message": "starting", "lastTransitionTime": "t"},
    {"type": "ClaimsBound", "status": "False", "reason": "ProvisioningFailed", "message": "no class"},
]


def test_the_view_says_what_the_status_says() -> None:
    job = _job(7, CONDITIONS)
    seen = binding.seen_of(job)
    assert seen.revision == 7 and seen.waits
    for kind in ("Ready", "ClaimsBound", "PodsReady"):
        assert seen.said_false(kind) == said_false(job["status"], kind)
    updates = [ConditionUpdate("ClaimsBound", "False", "ProvisioningFailed", "no class"),
               ConditionUpdate("ClaimsBound", "False", "ProvisioningFailed", "another"),
               ConditionUpdate("ClaimsBound", "True", "Bound", "bound"),
               ConditionUpdate("PodsReady", "True", "Started", "started")]
    for update in updates:
        assert seen.holds(update) == conditions_hold(job["status"], (update,))


def test_a_job_is_parsed_again_only_once_it_has_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = JobCache()
    monkeypatch.setattr(kube, "JOBS", jobs)
    monkeypatch.setattr(binding, "_SEEN", {})
    jobs.remember(_job(7, CONDITIONS))
    first = asyncio.run(binding._seen("ns", "job"))
    assert first is not None and asyncio.run(binding._seen("ns", "job")) is first
    changed = copy.deepcopy(CONDITIONS[:1])
    jobs.remember(_job(8, changed, phase="Running"))
    second = asyncio.run(binding._seen("ns", "job"))
    assert second is not None and second is not first
    assert second.revision == 8 and not second.waits and not second.said_false("ClaimsBound")
    binding.forget("ns", "job")
    assert binding._SEEN == {}


def _claims_seen(revision: int, conditions: tuple = ()) -> binding._Seen:
    watched = binding._Watched({"ckpt": "checkpoints.volume", "models": "model.claimName"}, None, {})
    return binding._Seen(revision, True, watched, conditions)


def test_claims_seen_bound_are_not_listed_again_until_the_job_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    phases = {"ckpt": "Pending", "models": "Bound"}
    lists: list[str] = []

    async def claims_in(namespace: str) -> dict[str, kube.ClaimFacts]:
        lists.append(namespace)
        return {name: kube.ClaimFacts(("ReadWriteOnce",), phase, "2026-12-06T00:00:00Z")
                for name, phase in phases.items()}

    async def no_events(namespace: str) -> dict[str, list[dict]]:
        return {}

    warnings: list[dict] = []

    async def pod_warnings_in(namespace: str) -> list[pods.PodWarning]:
        return [pods.pod_warning_of(w) for w in warnings]

    monkeypatch.setattr(waiting_lists, "claims_in", claims_in)
    monkeypatch.setattr(waiting_lists, "claim_events_in", no_events)
    monkeypatch.setattr(waiting_lists, "pod_warnings_in", pod_warnings_in)
    for lookups in ("_CLAIMS", "_EVENTS", "_WARNED_PODS"):
        monkeypatch.setattr(binding, lookups, binding.SharedLookups(0))
    monkeypatch.setattr(binding, "_ALL_BOUND", {})
    first = _claims_seen(7)

    async def update(seen: binding._Seen) -> ConditionUpdate | None:
        return await binding._claims_update("ns", "job", seen)

    # One claim still unbound (and no Events: it has waited past the grace since 2026-12-06): reported, and
    # looked at on every check.
    problem = asyncio.run(update(first))
    assert problem is not None and problem.status == "False" and "ckpt" in problem.message
    asyncio.run(update(first))
    assert len(lists) == 2
    phases["ckpt"] = "Bound"
    assert asyncio.run(update(first)) is None  # bound now; nothing was said of it on this version of the job
    assert len(lists) == 3
    assert asyncio.run(update(first)) is None
    assert len(lists) == 3, "a job whose claims were all seen bound lists them no more"
    # The job changed (a False said before): listed once more, and the True that ends it still comes.
    said = _claims_seen(8, (("ClaimsBound", "False", "ProvisioningFailed", "no class"),))
    ended = asyncio.run(update(said))
    assert ended is not None and ended.status == "True" and len(lists) == 4
    assert asyncio.run(update(said)) == ended and len(lists) == 4
    # A pod of the job waits for a claim to bind (it was deleted and made again): the claims are listed again.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    warnings.append({"involvedObject": {"kind": "Pod", "name": "job-raycluster-x-head-abcde"}, "lastTimestamp": now,
                     "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."})
    phases["ckpt"] = "Pending"
    again = asyncio.run(update(said))
    assert again is not None and again.status == "False" and len(lists) == 5
    binding.forget("ns", "job")
    assert binding._ALL_BOUND == {}


def test_a_slow_claim_is_not_reported_while_its_class_keeps_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    phases = {"ckpt": "Pending", "models": "Pending", "other": "Pending"}
    # Asked for five minutes ago: past the grace (120 s), within a backlog's (ten graces).
    five_minutes_ago = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    asked = [{"type": "Normal", "reason": "ExternalProvisioning", "firstTimestamp": five_minutes_ago,
              "lastTimestamp": five_minutes_ago, "message": "waiting for a volume to be created by the "
              "external provisioner 'devcluster.grpo.dev/kwok'"}]

    async def claims_in(namespace: str) -> dict[str, kube.ClaimFacts]:
        return {name: kube.ClaimFacts(("ReadWriteOnce",), phase, five_minutes_ago, "std")
                for name, phase in phases.items()}

    async def events_in(namespace: str) -> dict[str, list[dict]]:
        return {name: asked for name in phases}

    monkeypatch.setattr(waiting_lists, "claims_in", claims_in)
    monkeypatch.setattr(waiting_lists, "claim_events_in", events_in)
    for lookups in ("_CLAIMS", "_EVENTS", "_WARNED_PODS"):
        monkeypatch.setattr(binding, lookups, binding.SharedLookups(0))
    monkeypatch.setattr(binding, "_ALL_BOUND", {})
    monkeypatch.setattr(binding, "_PROGRESS", {})
    seen = _claims_seen(7)
    # Nothing of its class has bound since anyone looked: a missing provisioner, as far as the operator can tell.
    first = asyncio.run(binding._claims_update("ns", "job", seen))
    assert first is not None and first.status == "False" and first.reason == "ExternalProvisioning"
    phases["other"] = "Bound"  # the provisioner is at work on the namespace's claims: the job's wait for it is not
    assert asyncio.run(binding._claims_update("ns", "job", seen)) is None
    # A job it was reported for stays reported until its claim binds: no True while the claim is still Pending.
    said = _claims_seen(8, ((first.type, first.status, first.reason, first.message),))
    still = asyncio.run(binding._claims_update("ns", "job", said))
    assert still is not None and still.status == "False"
    binding._PROGRESS["ns"] = binding.storage.BindingProgress(
        datetime.now(UTC), {"std": 1}, {"std": datetime.now(UTC) - timedelta(minutes=3)})  # then bound no more
    again = asyncio.run(binding._claims_update("ns", "job", seen))
    assert again is not None and again.status == "False"
