"""Guardrails that act, against the real control plane: a trip the trainer reports becomes a condition and an
Event; in act mode a rolled-back attempt with the changed setting, and after two rollbacks a suspension."""

from __future__ import annotations

import json
from typing import Any

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess

from .grpojobs import apply_job, condition, example, set_ray_outcome, wait_phase
from .kube import get, items, wait_for

pytestmark = pytest.mark.e2e

NAME = "qwen2-7b-length"  # examples/colocated-length.yaml; its RayJob has the same name
BASE_LR = 1e-6  # the example's learning rate (the API default)


def _report(cluster: LocalCluster, ns: str, attempt: int, detector: str, rollback_step: int | None,
            mode: str = "act") -> None:
    """What the trainer patches when `detector` trips (grpo_trainer.guardrails.status)."""
    entry = {"name": detector, "status": "tripped", "step": 40 + attempt, "trippedStep": 40 + attempt,
             "onsetStep": 38 + attempt, "value": 9.5, "baseline": 0.5, "mode": mode,
             "reason": f"{detector} far above its trailing median"}
    action = None
    if mode == "act":
        action = {"detector": detector, "onsetStep": 38 + attempt, "trippedStep": 40 + attempt,
                  "rollbackStep": rollback_step, "attempt": attempt, "state": "holding", "holdSeconds": 900}
    section = {"mode": mode, "attempt": attempt, "tripped": [detector], "detectors": [entry], "action": action}
    cluster.kubectl("patch", "grpojob", NAME, "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"progress": {"step": 40 + attempt, "guardrails": section}}}))


def _rayjob(cluster: LocalCluster, ns: str) -> dict | None:
    found = items(cluster, "rayjobs", "-n", ns, "--field-selector", f"metadata.name={NAME}")
    return found[0] if found else None


def _rollback_env(rayjob: dict) -> dict[str, Any] | None:
    env = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0].get("env", [])
    value = next((e["value"] for e in env if e["name"] == "GRPO_ROLLBACK"), None)
    return json.loads(value) if value is not None else None


def _new_attempt(cluster: LocalCluster, ns: str, old_uid: str, attempt: int) -> dict:
    """The RayJob created again for `attempt` (a new object: the old one was deleted)."""
    def created() -> dict | None:
        rayjob = _rayjob(cluster, ns)
        if rayjob is None or rayjob["metadata"]["uid"] == old_uid:
            return None
        rollback = _rollback_env(rayjob)
        return rayjob if rollback is not None and rollback["attempt"] == attempt else None

    return wait_for(f"RayJob {NAME} of attempt {attempt}", created, timeout=120)


def _event_reasons(cluster: LocalCluster, ns: str) -> list[str]:
    events = items(cluster, "events", "-n", ns, "--field-selector", f"involvedObject.name={NAME},"
                   "involvedObject.kind=GRPOJob")
    return [e["reason"] for e in events]


def test_act_rolls_back_twice_with_half_the_learning_rate_then_suspends_and_resumes(
        cluster: LocalCluster, team_ns: str) -> None:
    ns = team_ns
    set_ray_outcome(cluster, ns, NAME, "SUCCEEDED", "done", after_seconds=3600)  # keeps running
    apply_job(cluster, ns, example("colocated-length", guardrails={"mode": "act"}))
    wait_phase(cluster, ns, NAME, "Running", timeout=180)
    first = _rayjob(cluster, ns)
    assert first is not None and _rollback_env(first) is None
    guardrails_env = next(e["value"] for e in first["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
                          ["containers"][0]["env"] if e["name"] == "GRPO_GUARDRAILS")
    assert json.loads(guardrails_env)["mode"] == "act"

    # Attempt 1: grad_spike trips, the newest checkpoint before its onset is step 30.
    _report(cluster, ns, attempt=1, detector="grad_spike", rollback_step=30)
    second = _new_attempt(cluster, ns, first["metadata"]["uid"], attempt=2)
    rollback = _rollback_env(second)
    requested_at = rollback.pop("requestedAt")
    assert rollback == {"attempt": 2, "step": 30, "detector": "grad_spike",
                        "learningRate": pytest.approx(BASE_LR * 0.5), "klLossCoef": None}
    assert second["metadata"]["annotations"]["grpo.dev/attempt"] == "2"
    job = get(cluster, "grpojob", NAME, "-n", ns)
    tripped = condition(job, "GuardrailTripped")
    assert tripped["status"] == "True" and tripped["reason"] == "RolledBack"
    assert "grad_spike tripped at step 41" in tripped["message"] and "learningRate 1e-06 -> 5e-07" in tripped["message"]
    record = job["status"]["guardrails"]
    assert record["attempt"] == 2 and record["rollbacks"][0]["started"] is True
    assert record["rollbacks"][0]["requestedAt"] == requested_at  # the trainer's marker tells decisions apart
    assert record["trips"][0]["outcome"] == "RolledBack" and record["trips"][0]["checkpointStep"] == 30
    wait_for("GuardrailTripped and GuardrailRolledBack events",
             lambda: {"GuardrailTripped", "GuardrailRolledBack", "GuardrailAttemptStarted"}
             <= set(_event_reasons(cluster, ns)))
    wait_phase(cluster, ns, NAME, "Running", timeout=180)

    # A report of attempt 1 arriving late changes nothing; attempt 2's trip rolls back once more.
    _report(cluster, ns, attempt=1, detector="grad_spike", rollback_step=30)
    _report(cluster, ns, attempt=2, detector="kl_runaway", rollback_step=40)
    third = _new_attempt(cluster, ns, second["metadata"]["uid"], attempt=3)
    assert _rollback_env(third)["step"] == 40
    assert _rollback_env(third)["learningRate"] == pytest.approx(BASE_LR * 0.25)
    wait_phase(cluster, ns, NAME, "Running", timeout=180)

    # Attempt 3: the problem comes back after two rollbacks: suspended at the GRPOJob level.
    _report(cluster, ns, attempt=3, detector="kl_runaway", rollback_step=50)
    wait_phase(cluster, ns, NAME, "Suspended", timeout=120)
    wait_for("the RayJob deleted", lambda: _rayjob(cluster, ns) is None, timeout=120)
    job = get(cluster, "grpojob", NAME, "-n", ns)
    assert job["spec"]["scheduling"]["suspend"] is True
    assert job["status"]["guardrails"]["suspended"] is True
    assert condition(job, "Ready")["reason"] == "GuardrailSuspended"
    assert "came back after 2 rollback(s)" in condition(job, "GuardrailTripped")["message"]
    assert get(cluster, "pvc", f"{NAME}-checkpoints", "-n", ns)  # checkpoints kept

    # The user resumes: a new attempt from the suspending trip's checkpoint, the learning rate as it was.
    cluster.kubectl("patch", "grpojob", NAME, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"scheduling":{"suspend":false}}}')
    fourth = _new_attempt(cluster, ns, third["metadata"]["uid"], attempt=4)
    assert _rollback_env(fourth)["step"] == 50
    assert _rollback_env(fourth)["learningRate"] == pytest.approx(BASE_LR * 0.25)
    assert fourth["spec"].get("suspend") in (None, False)  # the RayJob's suspend is never the guardrails'
    wait_phase(cluster, ns, NAME, "Running", timeout=180)


def test_observe_records_the_trip_and_leaves_the_run_alone(cluster: LocalCluster, team_ns: str) -> None:
    ns = team_ns
    set_ray_outcome(cluster, ns, NAME, "SUCCEEDED", "done", after_seconds=3600)
    apply_job(cluster, ns, example("colocated-length"))
    wait_phase(cluster, ns, NAME, "Running", timeout=180)
    uid = _rayjob(cluster, ns)["metadata"]["uid"]
    _report(cluster, ns, attempt=1, detector="policy_collapse", rollback_step=None, mode="observe")

    def recorded() -> dict | None:
        job = get(cluster, "grpojob", NAME, "-n", ns)
        trips = (job["status"].get("guardrails") or {}).get("trips") or []
        return job if trips else None

    job = wait_for("the trip recorded", recorded, timeout=60)
    assert job["status"]["guardrails"]["trips"][0]["outcome"] == "Observed"
    tripped = condition(job, "GuardrailTripped")
    assert tripped["reason"] == "Observed" and "value 9.5, baseline 0.5" in tripped["message"]
    wait_for("the GuardrailTripped event", lambda: "GuardrailTripped" in _event_reasons(cluster, ns))
    # the same report again (the trainer patches every step) adds nothing
    _report(cluster, ns, attempt=1, detector="policy_collapse", rollback_step=None, mode="observe")
    assert len(get(cluster, "grpojob", NAME, "-n", ns)["status"]["guardrails"]["trips"]) == 1
    assert _rayjob(cluster, ns)["metadata"]["uid"] == uid
    assert get(cluster, "grpojob", NAME, "-n", ns)["status"]["phase"] == "Running"


def test_a_rollback_decided_before_an_operator_restart_is_carried_out_after_it(
        cluster: LocalCluster, team_ns: str, grpo_operator: OperatorProcess) -> None:
    """The operator wrote its decision (started: false) and stopped before deleting the RayJob: the operator that
    comes back deletes the old attempt's RayJob and creates the new attempt's."""
    ns = team_ns
    set_ray_outcome(cluster, ns, NAME, "SUCCEEDED", "done", after_seconds=3600)
    apply_job(cluster, ns, example("colocated-length", guardrails={"mode": "act"}))
    wait_phase(cluster, ns, NAME, "Running", timeout=180)
    first = _rayjob(cluster, ns)
    grpo_operator.kill()
    decided = {"attempt": 1, "suspended": False,
               "trips": [{"attempt": 1, "detector": "grad_spike", "outcome": "RolledBack", "checkpointStep": 20}],
               "rollbacks": [{"attempt": 2, "detector": "grad_spike", "fromStep": 20, "change": "learningRate "
                              "1e-06 -> 5e-07", "learningRate": 5e-7, "requestedAt": "2026-12-04T04:00:00Z",
                              "started": False}]}
    cluster.kubectl("patch", "grpojob", NAME, "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"phase": "Pending", "guardrails": decided}}))
    grpo_operator.start()
    second = _new_attempt(cluster, ns, first["metadata"]["uid"], attempt=2)
    assert _rollback_env(second)["step"] == 20
    wait_for("the attempt recorded as started",
             lambda: get(cluster, "grpojob", NAME, "-n", ns)["status"]["guardrails"]["rollbacks"][0]["started"])
    wait_phase(cluster, ns, NAME, "Running", timeout=180)
