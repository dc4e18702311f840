"""CPU: the start-up breakdown read from a run's timed log (bench/gpu/startup.py)."""

from __future__ import annotations

import pytest
import startup

# What grpo-train's log looks like, line by line, with the seconds run_grpo.stream puts in front.
OURS = [
    (0.0, "$ python -m grpo_trainer.cli --config_path verl-ours.yaml"),
    (9.2, "2026-12-03 10:00:09 INFO grpo_trainer: grpo-train: config built and validated in 2.1 s"),
    (11.0, "ray init kwargs: {'num_cpus': None, 'runtime_env': {}}"),
    (17.5, "2026-12-03 10:00:17,100\tINFO worker.py:2014 -- Started a local Ray instance."),
    (18.9, "2026-12-03 10:00:18 INFO grpo_trainer: grpo-train: data prepared in 1.2 s, while the task runner starts"),
    (38.0, "(GrpoTaskRunner pid=7) grpo-train: task runner prepared: imports 6.0 s, transfer queue 9.0 s"),
    (45.0, "(GrpoTaskRunner pid=7) INFO:2026-12-03 10:00:45,000:train and validate dataloader initialized, x"),
    (47.5, "(GrpoTaskRunner pid=7) INFO:2026-12-03 10:00:47,500:create worker group dict_keys(['actor_rollout_ref'])"),
    (70.0, "(GrpoTaskRunner pid=7) INFO:...:actor and ref model engine initialized"),
    (70.1, "(GrpoTaskRunner pid=7) INFO:...:reward loop manager initialized"),
    (150.0, "(GrpoTaskRunner pid=7) INFO:...:checkpoint engine manager initialized"),
    (150.4, "(GrpoTaskRunner pid=7) INFO:...:all initialize finished, ready to fit"),
    (185.4, "(GrpoTaskRunner pid=7) step:1 - timing_s/gen:6.3 - timing_s/step:35.0 - critic/score/mean:60"),
    (191.0, "(GrpoTaskRunner pid=7) step:2 - timing_s/gen:2.3 - timing_s/step:5.6"),
]


def timed(entries: list[tuple[float, str]]) -> list[str]:
    return [startup.timed_line(t, text) for t, text in entries]


def test_a_timed_line_reads_back() -> None:
    line = startup.timed_line(12.3456, "(TaskRunnerV1 pid=1) step:1 - a:1")
    assert startup.split_timed(line) == (12.346, "(TaskRunnerV1 pid=1) step:1 - a:1")
    assert startup.split_timed("step:1 - a:1") is None


def test_phases_run_from_marker_to_marker_and_add_up_to_the_first_step() -> None:
    b = startup.breakdown(timed(OURS))
    assert b.phases == {
        "driver imports, config, data": 11.0,
        "ray start": 6.5,
        "task runner up": 20.5,
        "task runner setup": 7.0,
        "worker group": 2.5,
        "model load": 22.5,
        "reward": 0.1,
        "vllm engine": 79.9,
        "ready to fit": 0.4,
        "first step": 35.0,
    }
    assert b.first_step_s == 185.4
    assert b.accounted_s == pytest.approx(185.4)
    assert b.first_generation_s == 6.3
    assert b.ours == {
        "config built and validated": 2.1,
        "data prepared": 1.2,
        "task runner: imports": 6.0,
        "task runner: transfer queue": 9.0,
    }


def test_stock_verl_lines_mark_the_same_phases() -> None:
    # stock has no grpo-train lines; its TaskRunner's first line is a warning verl prints at import
    first_line = "WARNING:2026-12-03 10:00:38,000:Platform 'nvidia' (PlatformCUDA) is registered but not available."
    stock = [
        (t, first_line if "task runner prepared" in text else text)
        for t, text in ((t, text.replace("GrpoTaskRunner", "TaskRunnerV1")) for t, text in OURS)
        if "grpo-train: config" not in text and "grpo-train: data" not in text
    ]
    stock = [(t, f"(TaskRunnerV1 pid=7) {text}" if text.startswith("WARNING:") else text) for t, text in stock]
    assert startup.breakdown(timed(stock)).phases == startup.breakdown(timed(OURS)).phases


def test_a_missing_marker_leaves_its_two_phases_open_and_the_rest_standing() -> None:
    b = startup.breakdown(timed([e for e in OURS if "reward loop manager" not in e[1]]))
    assert b.phases["reward"] is None and b.phases["vllm engine"] is None
    assert b.phases["model load"] == 22.5 and b.first_step_s == 185.4


def test_a_run_that_never_stepped_has_no_first_step() -> None:
    b = startup.breakdown(timed(OURS[:8]))
    assert b.first_step_s is None and b.phases["first step"] is None and b.first_generation_s is None


def test_the_table_has_a_column_per_run_and_the_totals() -> None:
    text = startup.table({"ours": startup.breakdown(timed(OURS)), "stock": startup.breakdown(timed(OURS[:3]))})
    assert "| phase (s) | ours | stock |" in text
    assert "| vllm engine | 79.9 | - |" in text
    assert "| **process start -> step 1 done** | **185.4** | **-** |" in text
    assert "| grpo-train: task runner: transfer queue | 9.0 | - |" in text
