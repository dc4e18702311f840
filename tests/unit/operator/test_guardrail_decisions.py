"""What the operator makes of the trainer's guardrail reports: record, roll back, suspend (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from grpo_operator.api import GuardrailsSpec
from grpo_operator.plan import PlanError
from grpo_operator.reconcile.guardrail_actions import base_settings, worth_a_look
from grpo_operator.reconcile.guardrails import Act, Outcome, Record, condition, decide, resume_after_suspension
from grpo_operator.render import render_rayjob
from grpo_operator.render.guardrails import (
    ROLLBACK_ENV,
    Rollback,
    Settings,
    attempt_of,
    trainer_guardrails,
    with_rollback,
)
from grpojob_fixtures import plan_of, spec_with

BASE = Settings(learning_rate=1e-6, kl_loss_coef=0.001)


def _section(attempt: int = 1, tripped: str = "grad_spike", action: bool = True, rollback_step: int | None = 30,
             mode: str = "act") -> dict[str, Any]:
    entry = {"name": tripped, "status": "tripped", "step": 34, "trippedStep": 33, "onsetStep": 31, "value": 12.5,
             "baseline": 0.7, "reason": "grad_norm 12.5 > 3 x trailing median 0.7", "mode": mode}
    section: dict[str, Any] = {
        "mode": mode, "attempt": attempt, "tripped": [tripped],
        "detectors": [entry, {"name": "kl_runaway", "status": "ok", "step": 34, "reason": ""}],
        "action": None,
    }
    if action:
        section["action"] = {"detector": tripped, "onsetStep": 31, "trippedStep": 33, "rollbackStep": rollback_step,
                             "attempt": attempt, "state": "holding"}
    return section


def _status(section: dict[str, Any], guardrails: dict[str, Any] | None = None, phase: str = "Running") -> dict:
    status: dict[str, Any] = {"phase": phase, "progress": {"step": 34, "guardrails": section}}
    if guardrails is not None:
        status["guardrails"] = guardrails
    return status


def _spec(**changes: Any) -> GuardrailsSpec:
    return GuardrailsSpec.model_validate({"mode": "act", **changes})


def test_observe_mode_records_the_trip_and_changes_nothing() -> None:
    decision = decide(GuardrailsSpec(), BASE, _status(_section(mode="observe", action=False)))
    assert decision.act is Act.NONE
    [(trip, outcome)] = decision.trips
    assert (trip.detector, trip.step, trip.onset_step, outcome) == ("grad_spike", 33, 31, Outcome.OBSERVED)
    cond = condition(decision, GuardrailsSpec(), Record())
    assert cond is not None and cond.type == "GuardrailTripped" and cond.reason == "Observed"
    assert "value 12.5" in cond.message and "baseline 0.7" in cond.message and "nothing was changed" in cond.message


def test_a_recorded_trip_is_not_recorded_again() -> None:
    status = _status(_section(mode="observe", action=False),
                     {"attempt": 1, "trips": [{"attempt": 1, "detector": "grad_spike", "outcome": "Observed"}]})
    assert decide(GuardrailsSpec(), BASE, status).empty


def test_act_rolls_back_to_the_checkpoint_before_the_onset_with_half_the_learning_rate() -> None:
    decision = decide(_spec(), BASE, _status(_section()))
    assert decision.act is Act.ROLLBACK
    # only the changed setting travels (the KL coefficient stays as the job's config has it)
    assert decision.rollback == Rollback(attempt=2, step=30, detector="grad_spike", learning_rate=5e-7)
    assert decision.change == "learningRate 1e-06 -> 5e-07"
    assert decision.trips[0][1] is Outcome.ROLLED_BACK and decision.trips[0][0].checkpoint_step == 30
    cond = condition(decision, _spec(), Record())
    assert cond is not None and cond.reason == "RolledBack"
    assert "attempt 2 resumes from checkpoint step 30" in cond.message and "rollback 1 of at most 2" in cond.message


def test_second_rollback_halves_again_and_the_third_trip_suspends() -> None:
    first = {"attempt": 2, "fromStep": 30, "learningRate": 5e-7, "started": True, "detector": "grad_spike"}
    trips = [{"attempt": 1, "detector": "grad_spike", "outcome": "RolledBack"}]
    second = decide(_spec(), BASE, _status(_section(attempt=2), {"attempt": 2, "trips": trips, "rollbacks": [first]}))
    assert second.act is Act.ROLLBACK and second.rollback is not None
    assert (second.rollback.attempt, second.rollback.learning_rate) == (3, 2.5e-7)
    both = [first, {**first, "attempt": 3, "learningRate": 2.5e-7}]
    trips.append({"attempt": 2, "detector": "grad_spike", "outcome": "RolledBack"})
    third = decide(_spec(), BASE, _status(_section(attempt=3), {"attempt": 3, "trips": trips, "rollbacks": both}))
    assert third.act is Act.SUSPEND and "came back after 2 rollback(s)" in third.why
    assert third.trips[-1][1] is Outcome.SUSPENDED


def test_max_rollbacks_zero_suspends_at_the_first_act_trip() -> None:
    decision = decide(_spec(rollback={"maxRollbacks": 0}), BASE, _status(_section()))
    assert decision.act is Act.SUSPEND and "maxRollbacks is 0" in decision.why


def test_kl_coef_change_doubles_the_kl_loss_coefficient() -> None:
    decision = decide(_spec(rollback={"change": "klCoef"}), BASE, _status(_section()))
    assert decision.rollback is not None
    assert (decision.rollback.learning_rate, decision.rollback.kl_loss_coef) == (None, 0.002)
    assert decision.change == "klLossCoef 0.001 -> 0.002"


def test_no_checkpoint_before_the_onset_rolls_back_to_the_start() -> None:
    decision = decide(_spec(), BASE, _status(_section(rollback_step=None)))
    assert decision.rollback is not None and decision.rollback.step == 0
    cond = condition(decision, _spec(), Record())
    assert cond is not None and "the start (no checkpoint was saved before the onset)" in cond.message


def test_detector_kept_in_observe_does_not_roll_back_an_act_job() -> None:
    spec = _spec(detectors={"gradSpike": {"mode": "observe"}})
    decision = decide(spec, BASE, _status(_section()))
    assert decision.act is Act.NONE and decision.trips[0][1] is Outcome.OBSERVED


@pytest.mark.parametrize("guardrails", [
    {"attempt": 2, "rollbacks": [{"attempt": 2, "fromStep": 30, "started": True}]},  # the old attempt's report
    {"attempt": 1, "rollbacks": [{"attempt": 2, "fromStep": 30, "started": False}]},  # rollback not started yet
    {"attempt": 1, "suspended": True},
], ids=["stale-attempt", "pending-rollback", "suspended"])
def test_nothing_is_decided_twice(guardrails: dict[str, Any]) -> None:
    assert decide(_spec(), BASE, _status(_section(attempt=1), guardrails)).empty


def test_only_an_active_job_with_a_trip_is_looked_at() -> None:
    assert worth_a_look({"status": _status(_section())})
    assert not worth_a_look({"status": _status(_section(), phase="Succeeded")})
    assert not worth_a_look({"status": _status({**_section(), "tripped": []})})
    assert not worth_a_look({"status": {"phase": "Running"}})


def test_resume_after_a_suspension_starts_from_the_suspending_trip_with_the_changes_so_far() -> None:
    record = Record.of({"guardrails": {
        "attempt": 3, "suspended": True,
        "trips": [{"attempt": 3, "detector": "kl_runaway", "checkpointStep": 60, "outcome": "Suspended"}],
        "rollbacks": [{"attempt": 3, "fromStep": 40, "learningRate": 2.5e-7, "started": True}],
    }})
    entry = resume_after_suspension(record, "2026-12-04T00:00:00Z")
    assert entry is not None
    assert (entry["attempt"], entry["fromStep"], entry["learningRate"], entry["started"]) == (4, 60, 2.5e-7, False)
    assert entry["resumed"] is True
    assert Record.of({"guardrails": {"rollbacks": [entry]}}).rollbacks_done == 0  # not a rollback of its own
    assert resume_after_suspension(Record(), "now") is None


def test_rollback_attempt_tells_every_ray_container(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body)
    rayjob = render_rayjob(spec, plan_of(spec))
    rollback = Rollback(attempt=2, step=30, detector="grad_spike", learning_rate=5e-7, requested_at="T")
    rolled = with_rollback(rayjob, rollback)
    assert attempt_of(rolled) == 2 and attempt_of(rayjob) == 1
    cluster = rolled["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for template in templates:
        [value] = [e["value"] for e in template["spec"]["containers"][0]["env"] if e["name"] == ROLLBACK_ENV]
        assert json.loads(value) == {"attempt": 2, "step": 30, "detector": "grad_spike", "learningRate": 5e-7,
                                     "klLossCoef": None, "requestedAt": "T"}
    assert rayjob == render_rayjob(spec, plan_of(spec))  # the input is left as it was


def test_base_settings_follow_the_users_verl_overrides(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(verl={"actor_rollout_ref.actor.optim.lr": 3e-6}))
    assert base_settings(spec, plan_of(spec)).learning_rate == 3e-6
    no_kl = spec_with(colocated_body, lambda s: s.update(algorithm={"klLoss": {"enabled": False}}))
    assert base_settings(no_kl, plan_of(no_kl)).kl_loss_coef is None


def test_kl_coef_rollback_refused_without_a_kl_loss(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["algorithm"] = {**s.get("algorithm", {}), "klLoss": {"enabled": False}}
        s["guardrails"] = {"mode": "act", "rollback": {"change": "klCoef"}}

    spec = spec_with(colocated_body, edit)
    with pytest.raises(PlanError, match=r"guardrails\.rollback\.change.*enable algorithm\.klLoss"):
        plan_of(spec)


def test_trainer_accepts_every_guardrails_setting_the_api_allows() -> None:
    from grpo_trainer.guardrails.config import parse_config

    full = GuardrailsSpec.model_validate({
        "mode": "act", "warmupSteps": 25, "holdSeconds": 120,
        "detectors": {
            "nonFinite": {"mode": "act"},
            "klRunaway": {"mode": "observe", "k": 2, "m": 4, "factor": 5, "minKl": 0.02, "window": 30},
            "gradSpike": {"enabled": False, "k": 3, "m": 5, "factor": 4, "z": 5, "window": 10},
            "policyCollapse": {"k": 5, "m": 8, "entropyRatio": 0.2, "spreadRatio": 0.2, "slopeWindow": 12},
            "degenerateBatch": {"k": 3, "m": 5, "clipRatio": 0.9, "spreadRatio": 0.1},
        },
    })
    config = parse_config(json.dumps(trainer_guardrails(full)))
    assert config.mode == "act" and config.warmup_steps == 25
    assert config.detectors.kl_runaway.min_kl == 0.02 and not config.detectors.grad_spike.enabled
    assert parse_config(json.dumps(trainer_guardrails(GuardrailsSpec()))).mode == "observe"


def test_act_mode_refused_when_checkpoints_are_not_resumed(colocated_body: dict[str, Any]) -> None:
    def edit(mode_of: dict[str, Any]) -> Any:
        return lambda s: s.update(checkpoints={**s.get("checkpoints", {}), "resume": "disable"}, guardrails=mode_of)

    for guardrails in ({"mode": "act"}, {"mode": "observe", "detectors": {"nonFinite": {"mode": "act"}}}):
        spec = spec_with(colocated_body, edit(guardrails))
        with pytest.raises(PlanError, match=r"checkpoints\.resume to auto"):
            plan_of(spec)
    observe = spec_with(colocated_body, edit({"mode": "act", "detectors": {
        d: {"mode": "observe"} for d in ("nonFinite", "klRunaway", "gradSpike", "policyCollapse", "degenerateBatch")}}))
    plan_of(observe)  # nothing acts: accepted


def test_the_trainer_reads_the_rollback_the_operator_renders() -> None:
    from grpo_trainer.rollback.request import parse_request

    rollback = Rollback(attempt=3, step=40, detector="kl_runaway", kl_loss_coef=0.004, requested_at="2026-12-04T00:00Z")
    request = parse_request(rollback.as_env()["value"])
    assert request is not None
    assert (request.attempt, request.step, request.learning_rate, request.kl_loss_coef) == (3, 40, None, 0.004)
    assert request.requested_at == "2026-12-04T00:00Z"


def test_k_and_m_are_judged_with_the_trainers_defaults(colocated_body: dict[str, Any]) -> None:
    from grpo_operator.api import PERSISTENCE_DEFAULTS
    from grpo_trainer.guardrails.config import DetectorsConfig

    trainer = DetectorsConfig()
    assert PERSISTENCE_DEFAULTS["policyCollapse"] == (trainer.policy_collapse.k, trainer.policy_collapse.m)
    for other in (trainer.kl_runaway, trainer.grad_spike, trainer.degenerate_batch):
        assert PERSISTENCE_DEFAULTS["other"] == (other.k, other.m)
    spec = spec_with(colocated_body, lambda s: s.update(guardrails={"detectors": {"klRunaway": {"k": 6}}}))
    with pytest.raises(PlanError, match=r"k 6 exceeds m 5 \(defaults k=3, m=5\)"):
        plan_of(spec)
    plan_of(spec_with(colocated_body, lambda s: s.update(guardrails={"detectors": {"policyCollapse": {"k": 6}}})))
