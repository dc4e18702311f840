"""GRPOJob phase and conditions follow the RayJob and the converter Job."""

from __future__ import annotations

from grpo_operator.reconcile.status import (
    ConditionUpdate,
    merge_conditions,
    observe_export,
    observe_rayjob,
    rehearsal_condition,
)


def _rayjob(deployment: str, **status: object) -> dict:
    return {"status": {"jobDeploymentStatus": deployment, **status}}


def test_missing_and_initializing_rayjob_is_pending() -> None:
    assert observe_rayjob("j", None, export_enabled=False).phase == "Pending"
    pending = observe_rayjob("j", _rayjob("Initializing", rayClusterName="j-abc",
                                          rayClusterStatus={"state": ""}), export_enabled=False)
    assert (pending.phase, pending.ready.reason) == ("Pending", "RayJobInitializing")
    assert "j-abc" in pending.ready.message


def test_running_rayjob_is_running_and_ready() -> None:
    running = observe_rayjob("j", _rayjob("Running", rayClusterName="j-abc"), export_enabled=True)
    assert (running.phase, running.ready.status) == ("Running", "True")
    assert running.fields["rayClusterName"] == "j-abc"


def test_retrying_rayjob_counts_restarts_and_says_it_resumes() -> None:
    retrying = observe_rayjob("j", _rayjob("Retrying", failed=2), export_enabled=False)
    assert retrying.phase == "Running"
    assert retrying.fields["restarts"] == 2
    assert "resumes from the latest checkpoint" in retrying.ready.message


def test_complete_rayjob_exports_only_when_export_is_enabled() -> None:
    done = observe_rayjob("j", _rayjob("Complete", endTime="2026-01-01T00:00:00Z"), export_enabled=False)
    assert (done.phase, done.finished, done.wants_export) == ("Succeeded", True, False)
    assert done.fields["completionTime"] == "2026-01-01T00:00:00Z"
    exporting = observe_rayjob("j", _rayjob("Complete"), export_enabled=True)
    assert (exporting.phase, exporting.finished, exporting.wants_export) == ("Exporting", False, True)


def test_failed_rayjob_carries_kuberay_reason_and_message() -> None:
    failed = observe_rayjob("j", _rayjob("Failed", reason="AppFailed", message="CUDA OOM in actor"),
                            export_enabled=True)
    assert (failed.phase, failed.ready.reason, failed.wants_export) == ("Failed", "AppFailed", False)
    assert "CUDA OOM in actor" in failed.ready.message


def test_suspended_rayjob_is_suspended() -> None:
    assert observe_rayjob("j", _rayjob("Suspended"), export_enabled=False).phase == "Suspended"


def _job(condition: str, message: str = "") -> dict:
    return {"status": {"conditions": [{"type": condition, "status": "True", "message": message,
                                       "lastTransitionTime": "2026-01-01T01:00:00Z"}]}}


def test_converter_success_records_path_step_and_size() -> None:
    result = {"path": "/export/exports/m", "step": 500, "sizeBytes": 15_000_000_000}
    done = observe_export("j-export", _job("Complete"), result, "exports/m")
    assert done.phase == "Succeeded"
    assert done.fields["export"] == {"path": "exports/m", "step": 500, "sizeBytes": 15_000_000_000}
    assert any(c.type == "Exported" and c.status == "True" for c in done.extra_conditions)


def test_converter_failure_fails_the_job_with_the_converter_message() -> None:
    failed = observe_export("j-export", _job("Failed", "BackoffLimitExceeded"),
                            {"ok": False, "reason": "MissingRanks", "message": "missing rank 3 of world size 4"})
    assert failed.phase == "Failed"
    assert "missing rank 3 of world size 4" in failed.ready.message
    assert observe_export("j-export", _job("Failed", "BackoffLimitExceeded"), None).ready.message.endswith(
        "BackoffLimitExceeded")


def test_running_converter_keeps_exporting() -> None:
    assert observe_export("j-export", {"status": {}}, None).phase == "Exporting"


def test_condition_transition_time_changes_only_with_status() -> None:
    first = merge_conditions([], (ConditionUpdate("Ready", "False", "A", "a"),), 1, at="t1")
    same = merge_conditions(first, (ConditionUpdate("Ready", "False", "B", "b"),), 2, at="t2")
    flipped = merge_conditions(same, (ConditionUpdate("Ready", "True", "C", "c"),), 2, at="t3")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["reason"] == "B"
    assert flipped[0]["lastTransitionTime"] == "t3"
    assert flipped[0]["observedGeneration"] == 2


def test_completed_rehearsal_succeeds_saying_nothing_was_trained() -> None:
    observed = observe_rayjob("job", _rayjob("Complete"), export_enabled=False, rehearsal=True)
    assert observed.phase == "Succeeded"
    assert "rehearsal passed, nothing was trained" in observed.ready.message
    assert not observed.wants_export


def test_rehearsal_verdict_becomes_a_condition_naming_each_failed_field_and_fix() -> None:
    assert rehearsal_condition(None) is None
    passed = rehearsal_condition({"passed": True, "checks": [{"name": "a", "ok": True}] * 3})
    assert (passed.status, passed.reason, passed.message) == ("True", "RehearsalPassed",
                                                               "all 3 checks passed (status.rehearsal lists them)")
    failed = rehearsal_condition({"passed": False, "checks": [
        {"name": "reward.function", "field": "spec.reward.function", "ok": False,
         "message": "compute_score raised ZeroDivisionError", "fix": "fix the function"},
        {"name": "ray.placement.global_pool", "field": "spec.placement.roles", "ok": True, "message": "ok"}]})
    assert (failed.status, failed.reason) == ("False", "RehearsalFailed")
    assert failed.message == ("1 of 2 checks failed: spec.reward.function: compute_score raised ZeroDivisionError "
                              "(fix: fix the function)")
