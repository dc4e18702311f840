"""Progress out of verl: the `grpo` tracking backend serves grpo_trainer_* metrics and builds the
GRPOJob status patch."""

from __future__ import annotations

import math
import urllib.request
from datetime import UTC, datetime

import pytest
import torch
from grpo_trainer.progress import tracking
from grpo_trainer.progress.prometheus import TrainerMetrics
from grpo_trainer.progress.score_std import SCORE_STD_KEY, with_score_std
from grpo_trainer.progress.status import StatusReporter, build_progress_patch
from grpo_trainer.progress.step_metrics import StepMetrics, extract
from prometheus_client.parser import text_string_to_metric_families


def _verl_step(step: int) -> dict[str, float]:
    """The keys verl 0.9.1's trainer logs each step (plus ones we ignore)."""
    return {
        "training/global_step": step,
        "critic/score/mean": 10.0 + step,
        "critic/score/std": 0.5 * step,
        "critic/score/min": 1.0,
        "critic/score/max": 20.0 + step,
        "actor/kl_loss": 0.001 * step,
        "actor/entropy": 2.0 - 0.1 * step,
        "response_length/mean": 100.0 + step,
        "perf/throughput": 1100.0,
        "timing_s/step": 5.2,
        "actor/pg_loss": -0.3,
    }


def _scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_metrics_endpoint_shows_the_values_of_the_last_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.tracking import Tracking

    env = tracking.ProgressEnv(
        metrics_enabled=True, metrics_port=0, metrics_address="127.0.0.1", job_namespace=None, job_name=None
    )
    monkeypatch.setattr(tracking, "_process_backend", {})
    tracking.install(env)
    config = {"actor_rollout_ref": {"actor": {"optim": {"total_training_steps": 30}}}, "trainer": {}}
    # verl's own Tracking with our backend named in trainer.logger, as verl's trainer creates it
    t = Tracking("p", "e", default_backend=["console", "grpo"], config=config)
    backend = t.logger["grpo"]
    try:
        for step in (1, 2, 3):
            t.log(_verl_step(step), step=step)
        port = backend.metrics._server.server_address[1]
        m = _scrape(port)
        assert m["grpo_trainer_step"] == 3
        assert m["grpo_trainer_total_steps"] == 30
        assert m["grpo_trainer_steps_total"] == 3
        assert m["grpo_trainer_reward_mean"] == 13.0
        assert m["grpo_trainer_reward_std"] == 1.5
        assert m["grpo_trainer_reward_min"] == 1.0
        assert m["grpo_trainer_reward_max"] == 23.0
        assert m["grpo_trainer_kl_loss"] == pytest.approx(0.003)
        assert m["grpo_trainer_entropy"] == pytest.approx(1.7)
        assert m["grpo_trainer_response_length_mean"] == 103.0
        assert m["grpo_trainer_throughput"] == 1100.0
        assert m["grpo_trainer_step_time_seconds"] == 5.2
    finally:
        backend.metrics.close()


def test_missing_or_non_finite_metrics_are_left_out_and_named() -> None:
    m = extract({"critic/score/mean": float("nan"), "actor/entropy": torch.tensor(1.25)}, step=4)
    assert m == StepMetrics(step=4, entropy=1.25, non_finite=("reward_mean",))


def test_grad_norm_and_clip_fraction_are_published() -> None:
    # Keys as a real verl 0.9.1 step logged them (bench/gpu/results/2026-12-02/pair1-ours.log.gz).
    m = extract({"actor/grad_norm": 0.1177, "actor/pg_clipfrac": 0.0123, "actor/pg_clipfrac_lower": 0.0}, step=3)
    metrics = TrainerMetrics()
    metrics.observe(m)
    assert metrics.registry.get_sample_value("grpo_trainer_grad_norm") == pytest.approx(0.1177)
    assert metrics.registry.get_sample_value("grpo_trainer_clip_fraction") == pytest.approx(0.0123)


def test_a_nan_step_is_counted_and_shown_as_nan_not_as_the_last_good_value() -> None:
    metrics = TrainerMetrics()
    metrics.observe(extract({"actor/pg_loss": -0.3, "actor/grad_norm": 0.2}, step=1))
    metrics.observe(extract({"actor/pg_loss": float("nan"), "actor/grad_norm": float("inf")}, step=2))
    metrics.observe(extract({"actor/pg_loss": -0.2, "actor/grad_norm": 0.3}, step=3))
    metrics.observe(extract({"actor/pg_loss": float("nan")}, step=4))
    assert metrics.registry.get_sample_value("grpo_trainer_nonfinite_steps_total") == 2
    assert math.isnan(metrics.registry.get_sample_value("grpo_trainer_pg_loss"))
    assert metrics.registry.get_sample_value("grpo_trainer_grad_norm") == pytest.approx(0.3)
    assert metrics.non_finite_count == 2


def test_the_entropy_baseline_is_the_median_of_the_first_ten_steps() -> None:
    metrics = TrainerMetrics()
    for step in range(1, 10):
        metrics.observe(StepMetrics(step=step, entropy=2.0 - 0.1 * step))
    assert math.isnan(metrics.registry.get_sample_value("grpo_trainer_entropy_baseline"))  # not yet known
    metrics.observe(StepMetrics(step=10, entropy=1.0))
    assert metrics.registry.get_sample_value("grpo_trainer_entropy_baseline") == pytest.approx(1.45)
    metrics.observe(StepMetrics(step=11, entropy=0.1))  # later steps never move it
    assert metrics.registry.get_sample_value("grpo_trainer_entropy_baseline") == pytest.approx(1.45)


def test_a_resumed_attempt_keeps_the_baseline_its_job_reported() -> None:
    class _Job:
        def get_namespaced_custom_object(self, *args: object) -> dict:
            return {"status": {"progress": {"step": 200, "entropyBaseline": 1.3}}}

    metrics = TrainerMetrics()
    tracking._restore_baseline(metrics, StatusReporter("team-a", "job1", api=_Job()))
    metrics.observe(StepMetrics(step=201, entropy=0.2))  # past step 10: it could never compute its own
    assert metrics.registry.get_sample_value("grpo_trainer_entropy_baseline") == pytest.approx(1.3)


def test_status_patch_carries_step_and_key_metrics() -> None:
    m = extract(_verl_step(7), step=7)
    patch = build_progress_patch(m, 30, datetime(2026, 12, 2, 13, 0, 5, tzinfo=UTC))
    assert patch == {
        "status": {
            "progress": {
                "step": 7,
                "totalSteps": 30,
                "updatedAt": "2026-12-02T13:00:05Z",
                "rewardMean": 17.0,
                "klDivergence": 0.007,
                "entropy": 1.3,
                "responseLengthMean": 107.0,
            }
        }
    }
    partial = build_progress_patch(StepMetrics(step=1), None, datetime(2026, 1, 1, tzinfo=UTC))
    assert partial == {"status": {"progress": {"step": 1, "updatedAt": "2026-01-01T00:00:00Z"}}}


class _RecordingApi:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def patch_namespaced_custom_object_status(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.fail:
            raise RuntimeError("403 Forbidden")


def test_status_reporter_patches_its_job_and_survives_api_errors(caplog: pytest.LogCaptureFixture) -> None:
    api = _RecordingApi()
    assert StatusReporter("team-a", "job1", api=api).report(StepMetrics(step=2, reward_mean=1.0), 10)
    ((args, kwargs),) = api.calls
    assert args[:5] == ("grpo.dev", "v1alpha1", "team-a", "grpojobs", "job1")
    assert args[5]["status"]["progress"]["step"] == 2
    assert kwargs["_content_type"] == "application/merge-patch+json"
    failing = StatusReporter("team-a", "job1", api=_RecordingApi(fail=True))
    assert failing.report(StepMetrics(step=3), 10) is False
    assert "403 Forbidden" in caplog.text


def test_score_std_is_added_to_verl_data_metrics() -> None:
    class Batch:
        batch = {"token_level_scores": torch.tensor([[0.0, 1.0], [0.0, 3.0]])}

    wrapped = with_score_std(lambda batch, use_critic: {"critic/score/mean": 2.0})
    assert wrapped(Batch(), use_critic=False) == {"critic/score/mean": 2.0, SCORE_STD_KEY: 1.0}


def test_trainer_metrics_ignore_absent_values() -> None:
    metrics = TrainerMetrics()
    metrics.observe(StepMetrics(step=1, reward_mean=5.0))
    metrics.observe(StepMetrics(step=2))
    assert metrics.registry.get_sample_value("grpo_trainer_reward_mean") == 5.0
    assert metrics.registry.get_sample_value("grpo_trainer_step") == 2


def test_status_patch_matches_the_grpojob_status_schema() -> None:
    # the operator's pydantic model is the CRD's source of truth: every key we patch must be one of its
    # fields (it ignores unknown keys, so check the names, then the values)
    from grpo_operator.api import ProgressStatus
    from grpo_trainer.guardrails.guardrails import Guardrails

    guardrails = Guardrails().section()
    patch = build_progress_patch(extract(_verl_step(5), step=5), 30, datetime(2026, 12, 2, tzinfo=UTC),
                                 entropy_baseline=1.9, non_finite_steps=0, guardrails=guardrails)
    progress = patch["status"]["progress"]
    aliases = {f.alias or name for name, f in ProgressStatus.model_fields.items()}
    assert set(progress) == aliases
    parsed = ProgressStatus.model_validate(progress)
    assert (parsed.step, parsed.total_steps, parsed.reward_mean) == (5, 30, 15.0)
    assert parsed.guardrails == guardrails  # kept whole: the CRD preserves the section's unknown fields


def test_the_crd_keeps_the_guardrails_section_the_trainer_reports() -> None:
    # without x-kubernetes-preserve-unknown-fields the apiserver would prune it from every status patch
    from grpo_operator.crd import build_crd

    progress = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"]["progress"]["properties"]
    assert progress["guardrails"].get("x-kubernetes-preserve-unknown-fields") is True
