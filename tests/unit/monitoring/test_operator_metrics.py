"""The operator's per-job series: what the alert rules join on must follow the GRPOJob's life."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from grpo_operator import metrics
from prometheus_client import REGISTRY

_names = itertools.count()


@pytest.fixture
def job() -> Iterator[tuple[str, str]]:
    """A job name no other test uses: the metrics live in the process-wide registry."""
    name = f"job-{next(_names)}"
    yield "team-a", name
    metrics.forget("team-a", name)


def _phase(namespace: str, name: str, phase: str) -> float | None:
    return REGISTRY.get_sample_value(
        "grpo_operator_job_phase", {"namespace": namespace, "grpojob": name, "phase": phase}
    )


def _coef(namespace: str, name: str) -> float | None:
    return REGISTRY.get_sample_value("grpo_operator_job_kl_coef", {"namespace": namespace, "grpojob": name})


def test_phase_series_moves_with_the_job(job: tuple[str, str]) -> None:
    metrics.record_phase(*job, "Running")
    assert _phase(*job, "Running") == 1
    metrics.record_phase(*job, "Failed")
    assert _phase(*job, "Failed") == 1
    assert _phase(*job, "Running") is None  # one series per job, so `== 1` alerts see only the current phase


def test_phase_counts_include_the_job_once(job: tuple[str, str]) -> None:
    before = REGISTRY.get_sample_value("grpo_operator_jobs", {"phase": "Exporting"})
    metrics.record_phase(*job, "Exporting")
    metrics.record_phase(*job, "Exporting")
    assert REGISTRY.get_sample_value("grpo_operator_jobs", {"phase": "Exporting"}) == before + 1


def _threshold(namespace: str, name: str, threshold: str) -> float | None:
    return REGISTRY.get_sample_value("grpo_operator_job_alert_threshold",
                                     {"namespace": namespace, "grpojob": name, "threshold": threshold})


def test_forget_drops_every_series_of_the_job(job: tuple[str, str]) -> None:
    metrics.record_phase(*job, "Running")
    metrics.record_spec(*job, {"algorithm": {"klLoss": {"enabled": True, "coef": 0.01}}})
    metrics.forget(*job)
    assert _phase(*job, "Running") is None
    assert _coef(*job) is None
    assert _threshold(*job, "kl_growth_factor") is None


def test_alert_thresholds_follow_the_spec_and_its_edits(job: tuple[str, str]) -> None:
    metrics.record_spec(*job, {})  # a spec around the CRD's defaults still gets the default thresholds
    assert (_threshold(*job, "entropy_collapse_fraction"), _threshold(*job, "kl_growth_factor")) == (0.3, 4.0)
    metrics.record_spec(*job, {"monitoring": {"entropyCollapseFraction": 0.1, "klGrowthFactor": 10}})
    assert (_threshold(*job, "entropy_collapse_fraction"), _threshold(*job, "kl_growth_factor")) == (0.1, 10.0)


def test_kl_coef_is_exported_from_the_spec(job: tuple[str, str]) -> None:
    metrics.record_spec(*job, {"algorithm": {"klLoss": {"enabled": True, "coef": 0.02}}})
    assert _coef(*job) == pytest.approx(0.02)


def test_kl_coef_disappears_when_the_kl_loss_is_turned_off(job: tuple[str, str]) -> None:
    metrics.record_spec(*job, {"algorithm": {"klLoss": {"enabled": True, "coef": 0.02}}})
    metrics.record_spec(*job, {"algorithm": {"klLoss": {"enabled": False, "coef": 0.02}}})
    assert _coef(*job) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, 0.001),  # the CRD default, for a spec that bypassed defaulting
        ({"algorithm": {"klLoss": {"coef": 0}}}, 0.0),
        ({"algorithm": {"klLoss": {"coef": 1}}}, 1.0),
        ({"algorithm": {"klLoss": {"enabled": False}}}, None),
        ({"algorithm": {"klLoss": {"coef": "high"}}}, None),
        ({"algorithm": {"klLoss": {"coef": True}}}, None),
    ],
)
def test_kl_coef_of_a_spec(spec: dict, expected: float | None) -> None:
    assert metrics.kl_coef(spec) == expected


def test_phase_counts_follow_a_job_from_phase_to_phase_and_out(job: tuple[str, str]) -> None:
    def count(phase: str) -> float:
        return REGISTRY.get_sample_value("grpo_operator_jobs", {"phase": phase}) or 0.0

    pending, running = count("Pending"), count("Running")
    metrics.record_phase(*job, "Pending")
    metrics.record_phase(*job, "Running")
    assert (count("Pending"), count("Running")) == (pending, running + 1)
    metrics.forget(*job)
    assert (count("Pending"), count("Running")) == (pending, running)
