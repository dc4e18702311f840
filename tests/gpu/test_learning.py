"""GRPO learns: the target-word reward rises over the steps at the learning rate, and not at rate 0.

The `learn` and `control` runs of the gpu batch (conftest.py): the tiny random model, the reward of
bench/gpu/token_reward.py, the same prompts and sampling, learning rate 1e-3 against 0. The verdict and
what "clearly above" means: bench/gpu/learning.py (3 standard errors of the slopes).
"""

from __future__ import annotations

import learning
import run_grpo
from gpu_runs import gpu_marks, outcome_of

pytestmark = gpu_marks()

MIN_STEPS = 10  # a capped run must still give a slope worth the name


def test_reward_slope_is_positive_and_clearly_above_the_controls(gpu_batch) -> None:
    learn, control = outcome_of(gpu_batch, "learn").result, outcome_of(gpu_batch, "control").result
    for run in (learn, control):
        assert len(run.steps) >= MIN_STEPS, f"{run.run}: only {len(run.steps)} steps (rc {run.rc})"
    verdict = learning.judge_runs(run_grpo.steps_of(learn.steps), run_grpo.steps_of(control.steps))
    print(verdict.describe())
    assert verdict.passed, verdict.describe()
