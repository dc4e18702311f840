"""CPU: reading verl's console step lines for the GPU benchmark (bench/gpu/steplog.py)."""

from __future__ import annotations

import math

import pytest
import steplog


def test_step_line_behind_a_ray_prefix_is_read_with_numpy_scalars() -> None:
    line = (
        "(TaskRunner pid=4242) step:3 - actor/entropy:np.float64(5.5) - critic/score/mean:63.5 - "
        "timing_s/step:5.25 - perf/throughput:1100 - actor/lr:1e-05 - actor/kl:nan"
    )
    step = steplog.parse_step_line(line)
    assert step is not None and step.step == 3
    assert step.metrics["actor/entropy"] == 5.5
    assert step.metrics["perf/throughput"] == 1100
    assert step.metrics["actor/lr"] == 1e-05
    assert math.isnan(step.metrics["actor/kl"])


def test_lines_without_metrics_are_not_steps() -> None:
    assert steplog.parse_step_line("Training Progress: step:3 of 10") is None
    assert steplog.parse_step_line("INFO starting step:1 - ") is None


def test_medians_leave_out_the_warm_up_step() -> None:
    steps = steplog.parse_steps([f"step:{i} - timing_s/step:{t}" for i, t in ((1, 40.0), (2, 5.0), (3, 7.0), (4, 6.0))])
    assert steplog.median(steps, steplog.STEP_TIME) == 6.0
    assert steplog.median(steps, steplog.STEP_TIME, skip_first=False) == 6.5
    assert steplog.ratio(6.0, 5.0) == 1.2
    assert steplog.ratio(6.0, None) is None


def test_a_repeated_step_keeps_its_last_line_and_steps_come_out_in_order() -> None:
    steps = steplog.parse_steps(["step:2 - timing_s/step:9", "step:1 - timing_s/step:1", "step:2 - timing_s/step:3"])
    assert [(s.step, s.get(steplog.STEP_TIME)) for s in steps] == [(1, 1.0), (2, 3.0)]


def test_ratio_of_means_carries_the_standard_error_of_both_runs() -> None:
    ours = steplog.parse_steps([f"step:{i} - timing_s/step:{t}" for i, t in enumerate((40.0, 5.0, 7.0), start=1)])
    stock = steplog.parse_steps([f"step:{i} - timing_s/step:{t}" for i, t in enumerate((30.0, 4.0, 6.0), start=1)])
    r, se = steplog.ratio_of_means(ours, stock)
    # means 6 and 5 (step 1 left out), standard errors 1 and 1
    assert r == 1.2
    assert se == pytest.approx(1.2 * math.sqrt((1 / 6) ** 2 + (1 / 5) ** 2))
    assert steplog.ratio_of_means(ours[:2], stock) is None  # one timed step: no spread
