"""CPU: the step-time ratio by the mean of pairs (bench/gpu/pairs.py)."""

from __future__ import annotations

import pairs
import pytest
import steplog


def run(times: list[float]) -> list[steplog.Step]:
    return [steplog.Step(i, {steplog.STEP_TIME: t}) for i, t in enumerate(times, start=1)]


def test_each_pair_leaves_out_step_one_and_the_figure_is_the_mean_of_pairs() -> None:
    ratio = pairs.pairs_ratio(
        [
            (run([40.0, 5.0, 7.0]), run([30.0, 5.0, 5.0])),  # means 6 / 5
            (run([30.0, 5.0, 5.0]), run([40.0, 5.0, 5.0])),  # means 5 / 5
        ]
    )
    assert [p.ratio_of_means for p in ratio.pairs] == [1.2, 1.0]
    assert ratio.pairs[0].ratio_of_medians == 1.2
    assert ratio.mean == pytest.approx(1.1)
    assert ratio.stderr == pytest.approx(0.1)  # stdev 0.1414 / sqrt(2)
    assert not ratio.meets_target
    assert "by the mean of 2 pairs: 1.100 +- 0.100" in ratio.describe()


def test_one_pair_has_no_spread_and_a_run_without_timed_steps_is_refused() -> None:
    one = pairs.pairs_ratio([(run([9.0, 5.0, 5.0]), run([9.0, 5.0, 5.0]))])
    assert one.stderr is None and one.meets_target
    with pytest.raises(ValueError, match="timed steps"):
        pairs.pair_of(run([40.0]), run([30.0, 5.0]))
