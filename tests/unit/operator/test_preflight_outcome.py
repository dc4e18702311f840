"""A preflight Job and its pod's termination message into the GRPOJob's Preflight condition."""

from __future__ import annotations

from grpo_operator.reconcile import preflight


def job(condition: str | None = None, reason: str = "", message: str = "") -> dict:
    conditions = [{"type": condition, "status": "True", "reason": reason, "message": message}] if condition else []
    return {"metadata": {"name": "qwen-preflight"}, "status": {"conditions": conditions}}


VERDICT_FAILED = {
    "passed": False,
    "checks": [
        {"name": "verl.keys", "field": "spec.verl", "ok": True, "message": "12 keys", "value": "", "fix": ""},
        {"name": "model.context_length", "field": "spec.data.maxResponseLength", "ok": False,
         "message": "4608 tokens exceed the model's max_position_embeddings=4096",
         "value": "maxPromptLength 512 + maxResponseLength 4096 = 4608", "fix": "lower data.maxResponseLength"},
    ],
}


def test_a_running_job_is_running() -> None:
    result = preflight.outcome(job(), None)
    assert result.state == "running"
    assert [(c.type, c.status, c.reason) for c in preflight.conditions(result)] == [
        ("Preflight", "Unknown", "Running"), ("Ready", "False", "PreflightRunning")]


def test_a_passing_verdict_passes() -> None:
    verdict = {"passed": True, "checks": [{**VERDICT_FAILED["checks"][0]}]}
    result = preflight.outcome(job("Complete"), verdict)
    assert result.state == "passed" and result.message == "preflight Job qwen-preflight: 1 checks passed"
    assert [(c.type, c.status, c.reason) for c in preflight.conditions(result)] == [("Preflight", "True", "Passed")]
    assert result.sizing is None


def test_a_passing_verdict_carries_what_it_sized_to_the_rayjobs_creation() -> None:
    sizing = {"values": {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32}, "summary": "sized"}
    verdict = {"passed": True, "checks": [{**VERDICT_FAILED["checks"][0], "ok": True}], "sizing": sizing}
    assert preflight.outcome(job("Complete"), verdict).sizing == sizing


def test_a_failing_verdict_names_field_value_and_fix() -> None:
    result = preflight.outcome(job("Failed", "BackoffLimitExceeded"), VERDICT_FAILED)
    assert result.state == "failed" and result.field == "spec.data.maxResponseLength"
    assert result.message == (
        "preflight failed: spec.data.maxResponseLength: 4608 tokens exceed the model's max_position_embeddings=4096"
        " (found: maxPromptLength 512 + maxResponseLength 4096 = 4608); fix: lower data.maxResponseLength")
    by_type = {c.type: c for c in preflight.conditions(result)}
    assert (by_type["Preflight"].status, by_type["Preflight"].reason) == ("False", "Failed")
    assert by_type["Valid"].reason == "PreflightFailed" and by_type["Ready"].reason == "PreflightFailed"
    status = preflight.preflight_status("qwen-preflight", "abc", result)
    assert status["passed"] is False and [f["name"] for f in status["failures"]] == ["model.context_length"]


def test_more_failures_than_the_message_shows_are_counted() -> None:
    checks = [{"name": f"c{i}", "field": f"spec.f{i}", "ok": False, "message": "bad"} for i in range(5)]
    result = preflight.outcome(job("Failed"), {"passed": False, "checks": checks})
    assert result.message.endswith("(and 2 more)") and len(result.failures) == 5


def test_a_pod_that_died_before_its_verdict_says_what_its_log_said() -> None:
    result = preflight.outcome(job("Failed", "BackoffLimitExceeded"), {"message": "Traceback ... MemoryError"})
    assert result.state == "failed" and "failed without a verdict: Traceback ... MemoryError" in result.message


def test_a_deadline_names_the_timeout() -> None:
    result = preflight.outcome(job("Failed", "DeadlineExceeded", "Job was active longer than specified"), None)
    assert result.state == "failed" and "spec.preflight.timeoutSeconds" in result.message


def test_exit_zero_without_a_verdict_is_not_a_pass() -> None:
    assert preflight.outcome(job("Complete"), None).state == "failed"
    assert preflight.outcome(job("Complete"), {"message": "hello"}).state == "failed"


def test_only_the_job_of_the_expected_digest_counts() -> None:
    status = {"preflight": {"jobName": "qwen-preflight", "digest": "new"}}
    annotated = {"metadata": {"annotations": {"grpo.dev/content-digest": "old"}}}
    digest_of = preflight_digest = lambda j: j["metadata"]["annotations"]["grpo.dev/content-digest"]
    assert not preflight.expects(status, annotated, digest_of)
    annotated["metadata"]["annotations"]["grpo.dev/content-digest"] = "new"
    assert preflight.expects(status, annotated, preflight_digest)
    assert not preflight.expects({}, annotated, digest_of)


def grpojob(phase: str | None, generation: int = 2, observed: int = 2, digest: str | None = "d",
            deleting: bool = False) -> dict:
    meta: dict = {"generation": generation, **({"deletionTimestamp": "now"} if deleting else {})}
    status: dict = {"phase": phase, "observedGeneration": observed}
    if digest:
        status["preflight"] = {"jobName": "qwen-preflight", "digest": digest}
    return {"metadata": meta, "status": status}


def test_a_verdict_is_awaited_only_before_training_and_with_no_edit_pending() -> None:
    assert preflight.awaited(grpojob("Preflight")) == {"jobName": "qwen-preflight", "digest": "d"}
    assert preflight.awaited(grpojob("Invalid")) is not None  # failed: a re-run's verdict may still come
    assert preflight.awaited(grpojob("Pending")) is None  # passed: the RayJob is the job now
    assert preflight.awaited(grpojob("Preflight", generation=3)) is None  # an edit renders a new Job first
    assert preflight.awaited(grpojob("Invalid", digest=None)) is None  # refused before any preflight
    assert preflight.awaited(grpojob("Preflight", deleting=True)) is None


def test_an_edit_that_changes_nothing_checked_keeps_the_verdict_of_the_job_there() -> None:
    status = grpojob("Invalid")["status"]
    assert preflight.verdict_stands(status, "d", job_recreated=False)
    assert not preflight.verdict_stands(status, "other", job_recreated=False)
    assert not preflight.verdict_stands(status, "d", job_recreated=True)  # deleted to run it again
    assert not preflight.verdict_stands(grpojob("Pending")["status"], "d", job_recreated=False)


def test_the_size_the_preflight_chose_for_the_checkpoint_claim_is_kept_in_the_status() -> None:
    verdict = {"passed": True, "checkpointClaimBytes": 374 * 2**30 + 1, "checks": [{**VERDICT_FAILED["checks"][0]}]}
    result = preflight.outcome(job("Complete"), verdict)
    assert result.checkpoint_claim_bytes == 374 * 2**30 + 1
    assert preflight.preflight_status("qwen-preflight", "d", result)["checkpointClaimSize"] == "375Gi"  # rounded up
    assert "checkpointClaimSize" not in preflight.preflight_status("qwen-preflight", "d", preflight.outcome(
        job("Complete"), {"passed": True, "checks": [{**VERDICT_FAILED["checks"][0]}]}))
