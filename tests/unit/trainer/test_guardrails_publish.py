"""Guardrail states reach the metrics, status.progress.guardrails and the replay CLI; a broken guardrail
never breaks a training step."""

from __future__ import annotations

import gzip
import json
import logging
import math
from datetime import UTC, datetime
from pathlib import Path

import guardrail_streams as streams
import pytest
from grpo_trainer.guardrails import Guardrails, Status, StepSample
from grpo_trainer.guardrails.replay import main as replay_main
from grpo_trainer.guardrails.sample import DetectorState
from grpo_trainer.guardrails.stats import Persistence, robust_sigma, theil_sen_slope
from grpo_trainer.progress import tracking
from grpo_trainer.progress.prometheus import TrainerMetrics
from grpo_trainer.progress.status import StatusReporter, build_progress_patch
from grpo_trainer.progress.step_metrics import StepMetrics

ONSET = streams.ONSET


def _run(samples: list[StepSample], g: Guardrails | None = None) -> Guardrails:
    g = g or Guardrails()
    for s in samples:
        g.observe(s)
    return g


def test_the_status_section_names_each_detector_with_onset_and_baselines() -> None:
    section = _run(streams.kl_step_change(50.0)[:45]).section()
    assert section["mode"] == "observe"
    assert section["tripped"] == ["kl_runaway"]
    by_name = {d["name"]: d for d in section["detectors"]}
    assert list(by_name) == ["non_finite", "kl_runaway", "grad_spike", "policy_collapse", "degenerate_batch"]
    kl = by_name["kl_runaway"]
    assert (kl["status"], kl["step"], kl["onsetStep"], kl["trippedStep"]) == ("tripped", 45, ONSET, ONSET + 2)
    assert kl["reason"].startswith("kl_loss ") and "3 of the last 5 steps out of bounds" in kl["reason"]
    assert by_name["grad_spike"]["status"] == "ok" and "onsetStep" not in by_name["grad_spike"]
    assert set(section["baselines"]) == {"kl_runaway", "grad_spike", "policy_collapse", "degenerate_batch"}
    assert set(section["baselines"]["policy_collapse"]) == {"entropy", "rewardStd"}
    json.dumps(section, allow_nan=False)  # strict JSON: what a merge patch can carry


def test_status_numbers_keep_six_significant_digits_and_drop_non_finite_ones() -> None:
    g = Guardrails()
    g.states["kl_runaway"] = DetectorState(
        "kl_runaway",
        Status.OK,
        3,
        "r",
        value=3.14159265e-7,
        baseline=math.nan,
        extra={"sigma": 123.456789, "x": math.inf},
    )
    (entry,) = [d for d in g.section()["detectors"] if d["name"] == "kl_runaway"]
    assert entry["value"] == 3.14159e-7
    assert "baseline" not in entry
    assert entry["values"] == {"sigma": 123.457}


def test_the_status_patch_carries_the_guardrails_section() -> None:
    section = _run(streams.stream()[:3]).section()
    patch = build_progress_patch(StepMetrics(step=3), None, datetime(2026, 1, 1, tzinfo=UTC), guardrails=section)
    assert patch["status"]["progress"]["guardrails"] == section
    without = build_progress_patch(StepMetrics(step=3), None, datetime(2026, 1, 1, tzinfo=UTC))
    assert "guardrails" not in without["status"]["progress"]


def test_gauges_show_each_detectors_state() -> None:
    metrics = TrainerMetrics()
    g = Guardrails()
    for s in streams.kl_step_change(50.0)[:43]:
        metrics.guardrails.observe(g.observe(s))
    value = metrics.registry.get_sample_value
    assert value("grpo_trainer_guardrail_tripped", {"detector": "kl_runaway"}) == 1
    assert value("grpo_trainer_guardrail_tripped", {"detector": "grad_spike"}) == 0
    assert value("grpo_trainer_guardrail_onset_step", {"detector": "kl_runaway"}) == ONSET
    assert math.isnan(value("grpo_trainer_guardrail_onset_step", {"detector": "grad_spike"}))
    kl_now = streams.kl_step_change(50.0)[42].kl_loss
    assert value("grpo_trainer_guardrail_value", {"detector": "kl_runaway"}) == pytest.approx(kl_now)
    assert 0 < value("grpo_trainer_guardrail_baseline", {"detector": "kl_runaway"}) < kl_now / 10
    assert value("grpo_trainer_guardrail_warming", {"detector": "policy_collapse"}) == 0


def test_gauges_show_warming_and_nan_baselines_before_the_warm_up_ends() -> None:
    metrics = TrainerMetrics()
    g = Guardrails()
    for s in streams.stream()[:5]:
        metrics.guardrails.observe(g.observe(s))
    assert metrics.registry.get_sample_value("grpo_trainer_guardrail_warming", {"detector": "policy_collapse"}) == 1
    assert math.isnan(
        metrics.registry.get_sample_value("grpo_trainer_guardrail_baseline", {"detector": "policy_collapse"})
    )


def _verl(s: StepSample) -> dict[str, float]:
    return {
        "actor/kl_loss": s.kl_loss,
        "actor/grad_norm": s.grad_norm,
        "actor/entropy": s.entropy,
        "critic/score/mean": s.reward_mean,
        "critic/score/std": s.reward_std,
        "critic/score/max": s.reward_max,
        "response_length/clip_ratio": s.clip_ratio,
    }


class _Reporter:
    def __init__(self) -> None:
        self.sections: list[dict | None] = []

    def report(self, m, total_steps, entropy_baseline=None, non_finite_steps=None, guardrails=None) -> bool:
        self.sections.append(guardrails)
        return True


def test_the_tracking_backend_runs_the_guardrails_every_step(caplog: pytest.LogCaptureFixture) -> None:
    reporter = _Reporter()
    backend = tracking.GrpoTrackingBackend(TrainerMetrics(), reporter, guardrails=Guardrails())
    for s in streams.kl_step_change(50.0)[:43]:
        backend.log(_verl(s), s.step)
    assert len(reporter.sections) == 43
    assert reporter.sections[-1]["tripped"] == ["kl_runaway"]
    assert backend.metrics.registry.get_sample_value("grpo_trainer_guardrail_tripped", {"detector": "kl_runaway"}) == 1
    assert "guardrail kl_runaway tripped at step 42 (onset step 40)" in caplog.text


class _Broken:
    name = "broken"

    def observe(self, s: StepSample) -> DetectorState:
        raise ZeroDivisionError("a bug in a detector")

    def baselines(self) -> dict[str, float]:
        raise ZeroDivisionError("a bug in a detector")

    def restore(self, baselines: dict) -> None:
        raise ZeroDivisionError("a bug in a detector")


def test_a_failing_detector_is_logged_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    good = Guardrails()
    g = Guardrails(detectors=[_Broken(), *good.detectors])
    g.restore({"broken": {"x": 1.0}})
    reporter = _Reporter()
    backend = tracking.GrpoTrackingBackend(TrainerMetrics(), reporter, guardrails=g)
    for s in streams.nan_grad_norm(at=3)[:4]:
        backend.log({**_verl(s), "actor/grad_norm": math.nan if s.step == 3 else s.grad_norm}, s.step)
    assert len(reporter.sections) == 4  # every step still reported
    assert reporter.sections[-1]["tripped"] == ["non_finite"]
    assert "guardrail broken failed at step 4" in caplog.text


def test_a_refused_configuration_turns_guardrails_off_and_says_why_in_the_status() -> None:
    env = tracking.ProgressEnv.from_env({"GRPO_METRICS_ENABLED": "0", "GRPO_GUARDRAILS": '{"mode": "fix"}'})
    guardrails, error = tracking.guardrails_for(env)
    assert guardrails is None and "guardrails.mode" in error
    reporter = _Reporter()
    backend = tracking.GrpoTrackingBackend(TrainerMetrics(), reporter, guardrails_error=error)
    backend.log({"actor/kl_loss": 0.1}, 1)
    assert reporter.sections == [
        {"mode": "off", "attempt": 1, "error": error, "tripped": [], "detectors": [], "action": None}
    ]
    default, none = tracking.guardrails_for(tracking.ProgressEnv.from_env({}))
    assert default is not None and default.mode == "observe" and none is None


def test_a_resumed_attempt_restores_the_baselines_its_job_reported() -> None:
    earlier = _run(streams.stream()[:30]).section()

    class _Job:
        def get_namespaced_custom_object(self, *args: object) -> dict:
            return {"status": {"progress": {"step": 30, "entropyBaseline": 1.0, "guardrails": earlier}}}

    resumed = Guardrails()
    tracking._restore_baseline(TrainerMetrics(), StatusReporter("team-a", "job1", api=_Job()), resumed)
    restored = resumed.baselines()
    assert set(restored) == set(earlier["baselines"])
    for name, values in earlier["baselines"].items():
        assert restored[name] == pytest.approx(values, rel=1e-5)
    (state,) = [s for s in resumed.observe(streams.stream()[30]) if s.name == "policy_collapse"]
    assert state.status.value == "ok"  # judged at once: no second warm-up


def _write_steps(path: Path, records: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_replay_prints_each_step_and_the_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [{"step": s.step, **_verl(s)} for s in streams.stream()[:30]]
    records[24]["actor/grad_norm"] = "nan"  # as step_file writes a NaN
    path = tmp_path / "steps.jsonl.gz"
    _write_steps(path, records)
    assert replay_main([str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step 1: warming kl_runaway, grad_spike, policy_collapse, degenerate_batch"
    assert "step 21: ok" in lines
    assert "step 25: tripped non_finite (onset 25) NEW" in lines
    assert (
        "  non_finite [tripped]: non-finite grad_norm at step 25"
        in lines[lines.index("step 25: tripped non_finite (onset 25) NEW") + 1]
    )
    assert lines[-1] == "mode observe; trips: non_finite at step 25 (onset 25)"


def test_replay_refuses_a_bad_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_text('{"step": 1}\n')
    assert replay_main([str(path), "--config", '{"warmupSteps": 2}']) == 2
    assert "guardrails.warmupSteps" in capsys.readouterr().err
    assert replay_main([str(path)]) == 0


def test_persistence_trips_on_k_of_m_and_names_the_first_step_of_the_window() -> None:
    p = Persistence(k=3, m=5)
    pushes = [(10, True), (11, False), (12, True), (13, False), (14, False), (15, True), (16, True)]
    onsets = [p.push(step, out) for step, out in pushes]
    assert onsets == [None, None, None, None, None, None, 12]  # 10 left the window at 15


def test_a_constant_series_gets_a_sigma_floor_not_zero() -> None:
    assert robust_sigma([2.0] * 20, rel_floor=0.05) == pytest.approx(0.1)
    assert robust_sigma([0.0] * 20, rel_floor=0.05) == 0.0


def test_one_outlier_does_not_tilt_the_theil_sen_slope() -> None:
    flat = [1.0] * 9 + [100.0]
    assert theil_sen_slope(flat) == 0.0
    assert theil_sen_slope([0.0, 1.0, 2.0, 3.0]) == pytest.approx(1.0)
