"""The waiting check's view of a job (reconcile/binding.py): read like the job's status, parsed once per version."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from grpo_operator.reconcile import binding
from grpo_operator.reconcile.common import conditions_hold
from grpo_operator.reconcile.status import ConditionUpdate, said_false
from grpo_operator.runtime import kube
from grpo_operator.runtime.job_cache import JobCache
from grpo_operator.runtime.lookups import SharedLookups


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


def test_claims_all_bound_last_time_are_read_again_only_every_few_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    reads: list[float] = []

    async def claims_in(namespace: str) -> dict[str, kube.ClaimFacts]:
        reads.append(now[0])
        return {}

    period = 20.0
    monkeypatch.setattr(kube, "claims_in", claims_in)
    monkeypatch.setattr(binding, "_CLAIMS", SharedLookups(period, clock=lambda: now[0]))
    monkeypatch.setattr(binding, "_CLAIMS_BOUND",
                        SharedLookups(period * binding.BOUND_RECHECK_PERIODS, clock=lambda: now[0]))

    async def read(all_bound_before: bool) -> None:
        await binding._claims_in("ns", all_bound_before)

    asyncio.run(read(all_bound_before=True))
    assert reads == [0.0]
    now[0] = 1.5 * period
    asyncio.run(read(all_bound_before=True))  # within its few periods: no read
    assert reads == [0.0]
    asyncio.run(read(all_bound_before=False))  # a job whose claim waits: read every period
    assert reads == [0.0, 1.5 * period]
    now[0] = binding.BOUND_RECHECK_PERIODS * period + 1
    asyncio.run(read(all_bound_before=True))  # due again: the period's read, if fresh, else a new one
    assert reads == [0.0, 1.5 * period, now[0]]
