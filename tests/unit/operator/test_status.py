"""GRPOJob phase and conditions follow the RayJob and the converter Job."""

from __future__ import annotations

from grpo_operator.reconcile.status import (
    ConditionUpdate,
    merge_conditions,
    observe_export,
    observe_new_rayjob,
    observe_rayjob,
    rayjob_inputs,
    rehearsal_condition,
    restart_condition,
    slim_rayjob,
)


def _rayjob(deployment: str, **status: object) -> dict:
    return {"status": {"jobDeploymentStatus": deployment, **status}}


def test_missing_and_initializing_rayjob_is_pending() -> None:
    assert observe_rayjob("j", None, export_enabled=False).phase == "Pending"
    pending = observe_rayjob("j", _rayjob("Initializing", rayClusterName="j-abc",
                                          rayClusterStatus={"state": ""}), export_enabled=False)
    assert (pending.phase, pending.ready.reason) == ("Pending", "RayJobInitializing")
    assert pending.passive_fields["rayClusterName"] == "j-abc"
    assert "-l ray.io/originated-from-cr-name=j" in pending.ready.message


def test_the_ray_clusters_states_on_the_way_to_running_change_nothing_the_status_shows() -> None:
    """One status write per job while its cluster starts, not one per RayCluster state (bench/operator)."""
    seen = [observe_rayjob("j", _rayjob("Initializing", rayClusterName="j-abc", rayClusterStatus={"state": state}),
                           export_enabled=False) for state in ("", "ready")]
    assert seen[0] == seen[1]


def test_kuberay_initializing_a_new_rayjob_asks_for_no_status_write_of_its_own() -> None:
    """The status written at creation is what Initializing gives but for the passive fields (the cluster's name
    and start time wait for the next write): one request per job less (bench/operator, issue 34)."""
    new = observe_new_rayjob("j", "team", export_enabled=True)
    initializing = observe_rayjob(
        "j", {"metadata": {"namespace": "team"},
              **_rayjob("Initializing", rayClusterName="j-abc", startTime="2026-12-05T00:00:00Z")},
        export_enabled=True,
    )
    assert (new.phase, new.ready, new.fields) == (initializing.phase, initializing.ready, initializing.fields)
    assert "-n team" in new.ready.message
    assert initializing.passive_fields == {"rayClusterName": "j-abc", "startTime": "2026-12-05T00:00:00Z"}
    assert new.passive_fields == {}


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


# --------------------------------------------------------------------------- honest counts and endings


def test_restarts_count_retries_started_not_failures() -> None:
    # retries: 1 (backoffLimit 1): attempt 1 fails -> Retrying with failed=1; attempt 2 fails -> Failed, failed=2.
    retrying = observe_rayjob("j", _rayjob("Retrying", failed=1), export_enabled=False)
    assert retrying.fields["restarts"] == 1
    rerun = observe_rayjob("j", _rayjob("Running", failed=1), export_enabled=False)
    assert rerun.fields["restarts"] == 1
    final = observe_rayjob("j", _rayjob("Failed", failed=2, reason="AppFailed", message="NaN loss at step 40"),
                           export_enabled=False)
    assert final.fields["restarts"] == 1  # KubeRay counted the last failure, but started no retry after it
    assert final.ready.message == "RayJob j failed after 2 attempts (1 restart): NaN loss at step 40"


def test_a_deadline_failure_without_retries_has_no_restart() -> None:
    failed = observe_rayjob("j", _rayjob("Failed", failed=1, reason="DeadlineExceeded", message="passed 3600s"),
                            export_enabled=False)
    assert failed.fields["restarts"] == 0
    assert "after 1 attempt (0 restarts)" in failed.ready.message


def test_kuberay_refusal_is_said_as_such() -> None:
    refused = observe_rayjob("j", _rayjob("ValidationFailed", message="bad spec"), export_enabled=False)
    assert (refused.phase, refused.ready.message) == ("Failed", "KubeRay refused RayJob j: bad spec")


def test_endings_carry_the_conditions_kubectl_wait_looks_for() -> None:
    done = observe_rayjob("j", _rayjob("Complete"), export_enabled=False)
    assert {(c.type, c.status) for c in done.extra_conditions} == {("Complete", "True"), ("Succeeded", "True")}
    failed = observe_rayjob("j", {"metadata": {"namespace": "team"}, **_rayjob("Failed", failed=1)},
                            export_enabled=False)
    (terminal,) = failed.extra_conditions
    assert (terminal.type, terminal.status) == ("Failed", "True")
    assert "kubectl logs -n team job/j -c ray-job-submitter" in terminal.message
    running = observe_rayjob("j", _rayjob("Running"), export_enabled=False)
    assert running.extra_conditions == ()
    exported = observe_export("j-export", _job("Complete"), {"path": "/export/m"}, "m")
    assert {c.type for c in exported.extra_conditions} == {"Exported", "Complete", "Succeeded"}
    export_failed = observe_export("j-export", _job("Failed", "BackoffLimitExceeded"), None)
    assert {c.type for c in export_failed.extra_conditions} == {"Exported", "Failed"}


def test_status_logs_name_the_submitter_job_and_a_ready_command() -> None:
    running = observe_rayjob("j", {"metadata": {"namespace": "team"}, **_rayjob("Running")}, export_enabled=False)
    assert running.fields["logs"] == {"submitterJob": "j", "command": "kubectl logs -n team job/j -c ray-job-submitter"}


def test_the_cluster_is_released_after_success_only() -> None:
    kept = {"spec": {"ttlSecondsAfterFinished": 300}}
    assert observe_rayjob("j", {**kept, **_rayjob("Complete")}, export_enabled=False).release_cluster
    assert observe_rayjob("j", {**kept, **_rayjob("Complete")}, export_enabled=True).release_cluster
    assert not observe_rayjob("j", {**kept, **_rayjob("Failed", failed=1)}, export_enabled=False).release_cluster
    released = {"spec": {"ttlSecondsAfterFinished": 0}}
    assert not observe_rayjob("j", {**released, **_rayjob("Complete")}, export_enabled=False).release_cluster


def test_restart_condition_does_not_guess_the_checkpoint() -> None:
    unknown = restart_condition(1, 2, None)
    assert unknown.message == ("attempt 2 of 3 after a failure; resumes from the latest checkpoint in the job's "
                               "directory, or from step 0 if none was saved")
    known = restart_condition(2, 2, {"step": 100, "path": "/checkpoints/global_step_100"})
    assert known.message.startswith("attempt 3 of 3 after a failure; resumes from checkpoint step 100")
    assert "starts from step 0" in restart_condition(1, 2, None, resume="disable").message


class _Recording(dict):
    """A dict that notes every key read from it (and from the dicts inside it)."""

    def __init__(self, data: dict, read: set[str], prefix: str = "") -> None:
        super().__init__({k: _Recording(v, read, f"{prefix}{k}.") if isinstance(v, dict) else v
                          for k, v in data.items()})
        self._read, self._prefix = read, prefix

    def get(self, key, default=None):  # type: ignore[override]
        self._read.add(self._prefix + key)
        return super().get(key, default)

    def __getitem__(self, key):  # type: ignore[override]
        self._read.add(self._prefix + key)
        return super().__getitem__(key)


def test_observe_rayjob_reads_nothing_of_a_rayjob_beyond_its_inputs() -> None:
    """Mirroring skips a RayJob event whose `rayjob_inputs` did not change: that holds only while the inputs are
    everything the observation reads."""
    for deployment in ("Initializing", "Running", "Retrying", "Suspended", "Complete", "Failed", "ValidationFailed",
                       "Odd"):
        read: set[str] = set()
        rayjob = {"metadata": {"namespace": "team", "uid": "u1", "name": "j"},
                  "spec": {"ttlSecondsAfterFinished": 0},
                  "status": {"jobDeploymentStatus": deployment, "rayClusterName": "j-abc", "failed": 1,
                             "rayClusterStatus": {"state": "ready"}, "jobStatus": "RUNNING"}}
        for export in (True, False):
            observe_rayjob("j", _Recording(rayjob, read), export_enabled=export)
        inputs: set[str] = set()
        rayjob_inputs(_Recording(rayjob, inputs))
        assert read <= inputs, f"{deployment}: observe_rayjob read {sorted(read - inputs)}; add them to rayjob_inputs"


def test_the_slim_rayjob_mirroring_keeps_observes_like_the_whole_one() -> None:
    for deployment in ("Initializing", "Running", "Retrying", "Suspended", "Complete", "Failed", "ValidationFailed"):
        rayjob = {"metadata": {"namespace": "team", "uid": "u1", "name": "j", "managedFields": [{"manager": "x"}]},
                  "spec": {"ttlSecondsAfterFinished": 0, "entrypoint": "grpo-train"},
                  "status": {"jobDeploymentStatus": deployment, "rayClusterName": "j-abc", "failed": 2,
                             "reason": "AppFailed", "message": "NaN", "startTime": "t0", "endTime": "t1",
                             "rayClusterStatus": {"state": "ready", "availableWorkerReplicas": 2}}}
        slim = slim_rayjob(rayjob)
        for export in (True, False):
            assert observe_rayjob("j", slim, export) == observe_rayjob("j", rayjob, export), deployment
        assert rayjob_inputs(slim) == rayjob_inputs(rayjob)
        assert "rayClusterStatus" not in slim["status"] and "managedFields" not in slim["metadata"]


def test_kuberays_cluster_status_rewrites_leave_the_rayjob_inputs_unchanged() -> None:
    base = {"metadata": {"namespace": "team", "uid": "u1"},
            "status": {"jobDeploymentStatus": "Initializing", "rayClusterName": "j-abc",
                       "rayClusterStatus": {"readyWorkerReplicas": 0}}}
    later = {**base, "status": {**base["status"], "rayClusterStatus": {"readyWorkerReplicas": 2}}}
    running = {**base, "status": {**base["status"], "jobDeploymentStatus": "Running"}}
    assert rayjob_inputs(base) == rayjob_inputs(later)
    assert rayjob_inputs(base) != rayjob_inputs(running)
    assert rayjob_inputs(None) != rayjob_inputs(base)
