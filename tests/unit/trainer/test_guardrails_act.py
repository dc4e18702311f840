"""act mode in the trainer: the status section names each detector's mode and the attempt's action, and the
tracking backend publishes the action (with the checkpoint to roll back to, pinned), then holds the
training loop until the operator ends the attempt, or fails after holdSeconds (docs/guardrails.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import guardrail_streams as streams
import pytest
from grpo_trainer.guardrails import Guardrails, StepSample, parse_config
from grpo_trainer.guardrails.action import Clock, GuardrailHoldExpired
from grpo_trainer.progress import tracking
from grpo_trainer.progress.prometheus import TrainerMetrics
from grpo_trainer.rollback.pins import pinned_steps

ONSET = streams.ONSET  # the x50 KL jump trips kl_runaway at ONSET + 2
NOW = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)


class FakeClock:
    """Sleeps take no time; records each sleep and how many status patches had been sent by then."""

    def __init__(self, reporter: Reporter) -> None:
        self.t = 0.0
        self.reporter = reporter
        self.sleeps: list[float] = []
        self.reports_at_first_sleep: int | None = None

    def sleep(self, seconds: float) -> None:
        if self.reports_at_first_sleep is None:
            self.reports_at_first_sleep = len(self.reporter.sections)
        self.sleeps.append(seconds)
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(monotonic=lambda: self.t, sleep=self.sleep, wall=lambda: NOW)


class Reporter:
    def __init__(self, failures: int = 0) -> None:
        self.sections: list[dict[str, Any] | None] = []
        self.failures = failures

    def report(self, m, total_steps, entropy_baseline=None, non_finite_steps=None, guardrails=None) -> bool:
        self.sections.append(guardrails)
        if self.failures:
            self.failures -= 1
            return False
        return True


def _verl(s: StepSample) -> dict[str, float]:
    return {"actor/kl_loss": s.kl_loss, "actor/grad_norm": s.grad_norm, "actor/entropy": s.entropy,
            "critic/score/mean": s.reward_mean, "critic/score/std": s.reward_std}


def _save(root: Path, *steps: int) -> None:
    for step in steps:
        actor = root / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x")


def _backend(config: dict[str, Any], root: Path | None, reporter: Reporter | None = None,
             attempt: int = 1) -> tuple[tracking.GrpoTrackingBackend, Reporter, FakeClock]:
    reporter = reporter or Reporter()
    clock = FakeClock(reporter)
    guardrails = Guardrails(parse_config(config), attempt=attempt)
    backend = tracking.GrpoTrackingBackend(TrainerMetrics(), reporter, guardrails=guardrails, checkpoint_root=root,
                                           clock=clock.clock())
    return backend, reporter, clock


def _train(backend: tracking.GrpoTrackingBackend, until: int) -> int:
    """verl's loop: log each step; the last step logged (the loop stops where log raises)."""
    for s in streams.kl_step_change(50.0)[:until]:
        backend.log(_verl(s), s.step)
    return until


# --- the section ------------------------------------------------------------------------------------


def test_the_section_carries_the_attempt_each_detectors_mode_and_a_null_action() -> None:
    g = Guardrails(parse_config({"mode": "act", "detectors": {"gradSpike": {"mode": "observe"}}}), attempt=2)
    for s in streams.stream()[:3]:
        g.observe(s)
    section = g.section()
    assert section["attempt"] == 2
    assert {d["name"]: d["mode"] for d in section["detectors"]} == {
        "non_finite": "act", "kl_runaway": "act", "grad_spike": "observe", "policy_collapse": "act",
        "degenerate_batch": "act"}
    # the key is there, null: a merge patch of a new attempt clears the last attempt's action
    assert "action" in section and section["action"] is None
    assert '"action": null' in json.dumps(section, allow_nan=False)


def test_an_observe_mode_trip_is_reported_without_an_action() -> None:
    g = Guardrails()
    for s in streams.kl_step_change(50.0)[:45]:
        g.observe(s)
    assert g.section()["tripped"] == ["kl_runaway"]
    assert g.acting_trip() is None and g.section()["action"] is None


# --- the tracking backend in act mode ----------------------------------------------------------------


def test_an_act_trip_publishes_the_action_pins_its_checkpoint_then_holds_and_fails(tmp_path: Path) -> None:
    _save(tmp_path, 20, 30, ONSET)  # the checkpoint of the onset step itself is already past the trouble
    backend, reporter, clock = _backend({"mode": "act", "holdSeconds": 120}, tmp_path, attempt=2)
    with pytest.raises(GuardrailHoldExpired) as e:
        _train(backend, 60)
    assert len(reporter.sections) == ONSET + 2  # no step after the trip's
    action = reporter.sections[-1]["action"]
    assert action == {
        "detector": "kl_runaway", "onsetStep": ONSET, "trippedStep": ONSET + 2, "rollbackStep": 30, "attempt": 2,
        "state": "holding", "since": "2026-12-05T09:30:00Z", "holdSeconds": 120, "values": action["values"],
        "reason": reporter.sections[-1]["detectors"][1]["reason"],
    }
    assert set(action["values"]) == {"value", "baseline"} and action["values"]["value"] > action["values"]["baseline"]
    assert all(section["action"] is None for section in reporter.sections[:-1])
    assert pinned_steps(tmp_path) == {30}
    assert clock.reports_at_first_sleep == ONSET + 2  # the status said so before the hold began
    assert sum(clock.sleeps) == pytest.approx(120) and max(clock.sleeps) <= 5
    message = str(e.value)
    for part in ("kl_runaway", f"step {ONSET + 2}", "holdSeconds (120 s)", "grpo-operator is running", "its log",
                 "spec.guardrails.mode"):
        assert part in message


def test_with_no_checkpoint_before_the_onset_the_action_rolls_back_to_the_start(tmp_path: Path) -> None:
    _save(tmp_path, ONSET)
    backend, reporter, _ = _backend({"mode": "act"}, tmp_path)
    with pytest.raises(GuardrailHoldExpired, match=r"holdSeconds \(900 s\)"):
        _train(backend, 60)
    assert reporter.sections[-1]["action"]["rollbackStep"] is None
    assert pinned_steps(tmp_path) == set()


def test_a_status_patch_that_failed_is_sent_again_while_holding(tmp_path: Path) -> None:
    backend, reporter, _ = _backend({"mode": "act", "holdSeconds": 60}, tmp_path)
    _train(backend, ONSET + 1)
    reporter.failures = 2  # the trip's patch and its first resend fail; the second resend gets through
    with pytest.raises(GuardrailHoldExpired):
        backend.log(_verl(streams.kl_step_change(50.0)[ONSET + 1]), ONSET + 2)
    assert len(reporter.sections) == ONSET + 1 + 3
    assert all(section["action"]["trippedStep"] == ONSET + 2 for section in reporter.sections[-3:])


def test_an_observe_mode_trip_does_not_hold(tmp_path: Path) -> None:
    _save(tmp_path, 30)
    backend, reporter, clock = _backend({"mode": "observe"}, tmp_path)
    assert _train(backend, 60) == 60
    assert reporter.sections[-1]["tripped"] == ["kl_runaway"] and reporter.sections[-1]["action"] is None
    assert clock.sleeps == [] and pinned_steps(tmp_path) == set()


def test_a_detector_in_observe_mode_does_not_hold_a_job_in_act_mode(tmp_path: Path) -> None:
    _save(tmp_path, 30)
    backend, reporter, clock = _backend({"mode": "act", "detectors": {"klRunaway": {"mode": "observe"}}}, tmp_path)
    assert _train(backend, 60) == 60
    last = reporter.sections[-1]
    assert last["tripped"] == ["kl_runaway"] and last["action"] is None
    assert {d["name"]: d["mode"] for d in last["detectors"]}["kl_runaway"] == "observe"
    assert clock.sleeps == [] and pinned_steps(tmp_path) == set()


def test_a_detector_in_act_mode_holds_a_job_in_observe_mode(tmp_path: Path) -> None:
    backend, reporter, _ = _backend({"mode": "observe", "detectors": {"klRunaway": {"mode": "act"}}}, tmp_path)
    with pytest.raises(GuardrailHoldExpired):
        _train(backend, 60)
    assert reporter.sections[-1]["action"]["detector"] == "kl_runaway"


def test_the_backend_finds_the_checkpoints_and_the_attempt_where_verl_and_the_operator_put_them() -> None:
    assert tracking.checkpoint_root_from({"trainer": {"default_local_dir": "/ckpt/job1"}}) == Path("/ckpt/job1")
    assert tracking.checkpoint_root_from({"trainer": {}}) is None and tracking.checkpoint_root_from(None) is None
    env = tracking.ProgressEnv.from_env({"GRPO_ROLLBACK": '{"attempt": 2, "step": 30}', "GRPO_GUARDRAILS": "{}"})
    guardrails, _ = tracking.guardrails_for(env)
    assert env.attempt == 2 and guardrails is not None and guardrails.section()["attempt"] == 2
