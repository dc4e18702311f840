"""CPU: the learning verdict on synthetic step streams (bench/gpu/learning.py)."""

from __future__ import annotations

import math
import random

import learning
import pytest
import steplog

STEPS = 30


def stream(slope: float, noise: float, seed: int, start: float = 0.01) -> list[steplog.Step]:
    """A reward per step: a line plus Gaussian noise, as steplog reads verl's console lines."""
    rng = random.Random(seed)
    return [steplog.Step(i, {steplog.REWARD: start + slope * i + rng.gauss(0, noise)}) for i in range(1, STEPS + 1)]


CONTROL = stream(0.0, 0.001, seed=2)


def test_the_slope_and_its_error_are_least_squares() -> None:
    exact = learning.fit_slope([(1, 1.0), (2, 3.0), (3, 5.0), (4, 7.0)])
    assert exact.per_step == pytest.approx(2.0) and exact.stderr == pytest.approx(0.0)
    noisy = learning.fit_slope([(1, 0.0), (2, 1.0), (3, 0.0), (4, 1.0)])
    # by hand: fitted 0.2, 0.4, 0.6, 0.8; residual sum of squares 0.8; sxx 5: se = sqrt(0.8 / 2 / 5)
    assert noisy.per_step == pytest.approx(0.2) and noisy.stderr == pytest.approx(math.sqrt(0.08))
    assert (noisy.first_mean, noisy.last_mean) == (0.0, 1.0)


def test_a_learning_stream_passes() -> None:
    verdict = learning.judge_runs(stream(0.004, 0.002, seed=1), CONTROL)
    assert verdict.passed, verdict.describe()
    assert verdict.z_learning > learning.Z and verdict.z_difference > learning.Z


def test_a_flat_stream_fails() -> None:
    verdict = learning.judge_runs(stream(0.0, 0.002, seed=3), CONTROL)
    assert not verdict.passed
    assert any("not clearly positive" in r for r in verdict.reasons)


def test_a_sign_flipped_stream_fails() -> None:
    verdict = learning.judge_runs(stream(-0.004, 0.002, seed=4, start=0.2), CONTROL)
    assert not verdict.passed and verdict.z_learning < 0


def test_a_rise_within_the_noise_is_not_clear() -> None:
    # 0.0002 a step under noise 0.01: about 1 standard error over 30 steps, not 3
    verdict = learning.judge_runs(stream(0.0002, 0.01, seed=5), CONTROL)
    assert not verdict.passed


def test_a_control_that_rises_as_fast_fails_the_comparison() -> None:
    # the same rise with learning rate 0 means the rise is not the update's doing
    verdict = learning.judge_runs(stream(0.004, 0.002, seed=6), stream(0.004, 0.002, seed=7))
    assert verdict.z_learning > learning.Z and not verdict.passed
    assert any("not clearly above the control" in r for r in verdict.reasons)


def test_too_few_steps_for_a_slope_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        learning.reward_slope(stream(0.004, 0.002, seed=8)[:2])
