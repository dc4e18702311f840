"""Every step's whole verl metrics dict as a JSON line (grpo.metrics.stepsFile)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from grpo_trainer.config import worker_env
from grpo_trainer.progress import tracking
from grpo_trainer.progress.step_file import append_step, plain, read_steps, step_record
from grpo_trainer.settings import GrpoSettings


def test_values_become_strict_json_and_a_nan_loss_is_kept() -> None:
    assert plain(np.float64(1.5)) == 1.5 and plain(torch.tensor(2.0)) == 2.0 and plain(np.int64(3)) == 3
    assert [plain(math.nan), plain(math.inf), plain(-math.inf)] == ["nan", "inf", "-inf"]
    assert plain(True) is True and plain(None) is None and plain([1, np.float32(0.5)]) == [1, 0.5]
    assert plain(np.array([1.0, 2.0])) == "[1. 2.]"
    record = step_record({"actor/pg_loss": math.nan, "timing_s/step": np.float64(5.2)}, step=np.int64(3))
    assert record == {"step": 3, "actor/pg_loss": "nan", "timing_s/step": 5.2}
    json.dumps(record, allow_nan=False)  # strict: no NaN token


def test_steps_append_in_order_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "metrics" / "steps.jsonl"
    for step in (1, 2):
        append_step(path, {"critic/score/mean": 10.0 * step}, step)
    assert read_steps(path) == [{"step": 1, "critic/score/mean": 10.0}, {"step": 2, "critic/score/mean": 20.0}]


def test_the_setting_reaches_every_worker_as_an_environment_variable() -> None:
    settings = GrpoSettings.model_validate({"metrics": {"stepsFile": "/checkpoints/metrics/steps.jsonl"}})
    assert worker_env(settings, {})["GRPO_METRICS_STEPS_FILE"] == "/checkpoints/metrics/steps.jsonl"
    assert "GRPO_METRICS_STEPS_FILE" not in worker_env(GrpoSettings(), {})


def test_verls_tracking_with_our_backend_writes_each_logged_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl.utils.tracking import Tracking

    path = tmp_path / "steps.jsonl"
    env = tracking.ProgressEnv.from_env({"GRPO_METRICS_ENABLED": "0", "GRPO_METRICS_STEPS_FILE": str(path)})
    monkeypatch.setattr(tracking, "_process_backend", {})
    tracking.install(env)
    t = Tracking("p", "e", default_backend=["console", "grpo"], config={"trainer": {}})
    for step in (1, 2, 3):
        t.log({"critic/score/mean": float(step), "actor/entropy": np.float32(6.1), "actor/kl": math.nan}, step=step)
    steps = read_steps(path)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[2] == {"step": 3, "critic/score/mean": 3.0, "actor/entropy": pytest.approx(6.1), "actor/kl": "nan"}
