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
