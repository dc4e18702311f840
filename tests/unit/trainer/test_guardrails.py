"""The guardrails stay quiet on healthy runs that look alarming (synthetic, and our recorded H200 runs) and
trip on injected pathologies within a stated number of steps of their onset (docs/guardrails.md)."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import guardrail_streams as streams
import pytest
from grpo_trainer.guardrails import Guardrails, StepSample, parse_config
from grpo_trainer.guardrails.replay import read_records
from grpo_trainer.guardrails.sample import no_learning_signal
from grpo_trainer.progress.step_metrics import extract

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "gpu" / "results"
STATISTICAL = ("kl_runaway", "grad_spike", "policy_collapse", "degenerate_batch")


def trips(samples: Iterable[StepSample], guardrails: Guardrails | None = None) -> list[tuple[str, int, int]]:
    """(detector, onset step, trip step) of every trip, in the order they happened."""
    g = guardrails or Guardrails()
    found = []
    for s in samples:
        for state in g.observe(s):
            if state.tripped and state.tripped_step == s.step:
                found.append((state.name, state.onset_step, state.tripped_step))
    return found


# --- healthy streams: zero trips ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", sorted(streams.HEALTHY))
def test_healthy_streams_that_look_alarming_trip_nothing(name: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams.stream, "__defaults__", (streams.Curves(), 80, seed))
    samples = streams.HEALTHY[name]()
    assert len(samples) >= 60
    assert trips(samples) == []


def test_the_recovering_spike_would_trip_a_detector_without_persistence() -> None:
    # guards the healthy spike test from being vacuous: k-of-m is what keeps it quiet
    single_step = Guardrails(parse_config({"detectors": {"grad_spike": {"k": 1, "m": 1}}}))
    assert trips(streams.gradient_spike_that_recovers(), single_step) == [("grad_spike", 45, 45)]


def test_the_entropy_drop_stream_really_falls_below_the_collapse_threshold() -> None:
    # guards the test above from being vacuous: entropy alone would trip; the reward spread and rise save it
    samples = streams.entropy_drop_while_reward_rises()
    baseline = sorted(s.entropy for s in samples[:20])[10]
    assert min(s.entropy for s in samples[40:]) < 0.1 * baseline


def _recorded_jsonl() -> list[Path]:
    return sorted(RESULTS.glob("**/*.steps.jsonl.gz"))


# What each recorded run must trip, (detector, onset, trip step); every other run: nothing. guard-temp's
# length reward saturates at the 64-token cap (clip ratio 1, reward std 0 on 22 of 40 steps): a degenerate
# batch by definition. guard-lr (lr 0.1) trips nothing: its 18 steps are all inside the warm-up.
RECORDED_TRIPS = {
    "2026-12-04/batch/guard-temp.steps.jsonl.gz": [("degenerate_batch", 25, 29)],
    # the learning rate far too high (0.1 from step 26): the KL runs away within 4 steps (onset 27), then every
    # response is cut with no reward spread, and the entropy is gone too (0.0 against 6.14): under its bound from
    # step 28, the onset, though the reward's creep held the 5-of-8 window back until step 36
    "2026-12-04b/guard-resume/guard-lr.steps.jsonl.gz": [
        ("kl_runaway", 27, 29),
        ("degenerate_batch", 29, 31),
        ("policy_collapse", 28, 40),
    ],
    # the single-word reward at lr 4e-3, live in act mode: every response the word repeated (entropy 5.06 -> 0.001,
    # reward 1.0 with no spread). The entropy was under its bound from the first judged step, 21 (live, with the
    # code of the run, the onset was the window's first step, 33, and the rollback target checkpoint 30). Its
    # lr 2e-3 twin (guard-collapse-lr2e-3, 38 steps, read from its log) was still creeping towards 1.0 with 0.3x
    # the warm-up spread when its call ended, and trips nothing
    "2026-12-04c/guard-collapse/guard-collapse.steps.jsonl.gz": [
        ("policy_collapse", 21, 37),
        ("degenerate_batch", 35, 37),
    ],
}
# Attempts rolled back to an earlier run's checkpoint (2026-12-04b, guard-resume): judged after the steps of that
# run up to the checkpoint, as the operator's attempt is (its baselines restored from the status). On the device
# there is no GRPOJob to restore them from, so the live run warmed up again; the replay shows what a job's would do.
RESUMED_FROM = {
    f"2026-12-04b/guard-resume/guard-{name}.steps.jsonl.gz": ("2026-12-04b/guard-act/guard-base.steps.jsonl.gz", 25)
    for name in ("lr", "half")
}


def _steplog() -> ModuleType:  # bench/gpu/steplog.py: the parser of verl's console step lines (not a package)
    if "steplog" not in sys.modules:
        spec = importlib.util.spec_from_file_location("steplog", ROOT / "bench" / "gpu" / "steplog.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["steplog"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["steplog"]


def _log_steps(path: Path) -> list[StepSample]:
    with gzip.open(path, "rt", errors="replace") as f:
        steps = _steplog().parse_steps(f)
    return [StepSample.of(extract(s.metrics, s.step)) for s in steps]


def _recorded_logs() -> list[Path]:
    """The console logs of training runs (the export and placement logs have no step lines)."""
    return [p for p in sorted(RESULTS.glob("*/*.log.gz")) if _log_steps(p)]


def test_the_recorded_h200_runs_are_all_here() -> None:
    # learn: lr 1e-3, reward 0.003 -> 0.27, entropy 6.14 -> 4.98, KL 0 -> 1.14 and clip ratio 1.0 for
    # 6 steps: the healthiest-looking-alarming run we have; control: lr 0; smoke/ours: lr 1e-5
    assert {p.name for p in _recorded_jsonl()} >= {f"{n}.steps.jsonl.gz" for n in ("learn", "control", "smoke", "ours")}


def _samples(path: Path) -> list[StepSample]:
    records = list(read_records(path))
    source = RESUMED_FROM.get(str(path.relative_to(RESULTS)))
    if source is not None:
        before, step = source
        records = [r for r in read_records(RESULTS / before) if r["step"] <= step] + records
    return [StepSample.of(extract(r, r["step"])) for r in records]


@pytest.mark.parametrize("path", _recorded_jsonl(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_recorded_h200_step_files_trip_only_what_they_should(path: Path) -> None:
    samples = _samples(path)
    assert len(samples) >= 10
    assert trips(samples) == RECORDED_TRIPS.get(str(path.relative_to(RESULTS)), [])


def test_the_guard_temp_run_no_longer_trips_grad_spike_on_its_bimodal_grad_norm() -> None:
    # H200 false positive: grad norm 0.01 on zero-advantage steps, ~0.7 on the others; with both in one
    # trailing window grad_spike tripped at step 24. Not vacuous: without the advantages and reward std
    # (what tells the two kinds of step apart) the same run trips it again.
    path = RESULTS / "2026-12-04" / "batch" / "guard-temp.steps.jsonl.gz"
    assert "grad_spike" not in {name for name, _, _ in trips(_samples(path))}
    blind = [replace(s, reward_std=None, advantage_max=None, advantage_min=None) for s in _samples(path)]
    assert ("grad_spike", 21, 24) in trips(blind)


@pytest.mark.parametrize("path", _recorded_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_h200_console_logs_trip_nothing(path: Path) -> None:
    assert trips(_log_steps(path)) == []


def test_the_learn_run_is_judged_after_its_warm_up() -> None:
    # not vacuous: its last 10 steps are evaluated (status ok, not warming) by every statistical detector
    g = Guardrails()
    for r in read_records(RESULTS / "2026-12-03" / "learn.steps.jsonl.gz"):
        states = {s.name: s for s in g.observe(extract(r, r["step"]))}
    assert {name: states[name].status.value for name in STATISTICAL} == dict.fromkeys(STATISTICAL, "ok")


# --- injected pathologies: trip within a stated number of steps ---------------------------------

ONSET = streams.ONSET


def test_a_kl_step_change_of_50x_trips_on_the_third_step() -> None:
    assert trips(streams.kl_step_change(50.0)) == [("kl_runaway", ONSET, ONSET + 2)]


def test_a_kl_step_change_of_5x_is_below_the_factor_and_does_not_trip() -> None:
    assert trips(streams.kl_step_change(5.0)) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_kl_ramp_of_1_5x_per_step_trips_within_8_steps(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams.stream, "__defaults__", (streams.Curves(), 80, seed))
    ((name, onset, tripped),) = trips(streams.kl_ramp())
    assert name == "kl_runaway"
    # 1.5^6 > 10 x the trailing median at onset+5, then 3 of 5: onset+7 (+1 for noise)
    assert ONSET + 5 <= tripped <= ONSET + 8
    assert ONSET <= onset < tripped


def test_a_nan_grad_norm_trips_on_that_step_even_in_warm_up() -> None:
    assert trips(streams.nan_grad_norm(at=33)) == [("non_finite", 33, 33)]
    assert trips(streams.nan_grad_norm(at=3)) == [("non_finite", 3, 3)]


def test_an_infinite_loss_from_verl_trips_non_finite() -> None:
    g = Guardrails()
    g.observe(extract({"actor/loss": -0.1, "actor/grad_norm": 0.2}, step=1))
    (state,) = [s for s in g.observe(extract({"actor/loss": float("inf")}, step=2)) if s.name == "non_finite"]
    assert (state.status.value, state.onset_step, state.tripped_step) == ("tripped", 2, 2)
    assert "loss" in state.reason


def test_a_grad_norm_step_change_of_10x_trips_on_the_third_step() -> None:
    assert trips(streams.grad_step_change(10.0)) == [("grad_spike", ONSET, ONSET + 2)]


def test_a_grad_norm_step_change_of_2x_does_not_trip() -> None:
    assert trips(streams.grad_step_change(2.0)) == []


def test_grad_spike_silent_on_bimodal_zero_advantage_steps() -> None:
    assert trips(streams.bimodal_zero_advantage()) == []


def test_the_bimodal_stream_trips_grad_spike_when_every_step_is_compared() -> None:
    # guards the test above from being vacuous: the rule it replaced (all steps in one window) trips
    unmarked = [replace(s, reward_std=0.4, advantage_max=None, advantage_min=None)
                for s in streams.bimodal_zero_advantage()]
    assert [name for name, _, _ in trips(unmarked)] == ["grad_spike"]


def test_a_grad_spike_among_zero_advantage_steps_trips_on_the_third_signal_step() -> None:
    # signal steps from 64: 64, 65, 67 (66 has no signal and is not judged)
    assert trips(streams.bimodal_zero_advantage(spike_from=64)) == [("grad_spike", 64, 67)]


def test_a_step_has_no_learning_signal_when_its_advantages_or_else_its_reward_spread_are_zero() -> None:
    s = StepSample(step=7, reward_mean=64.0, reward_std=2.0, advantage_max=0.0, advantage_min=0.0)
    assert no_learning_signal(s)  # groups alike within, apart from each other: advantages say it
    assert no_learning_signal(replace(s, advantage_max=None, advantage_min=None, reward_std=3e-5))  # rounding
    assert not no_learning_signal(replace(s, advantage_max=1e-3))
    assert not no_learning_signal(replace(s, advantage_max=None, advantage_min=None))
    assert not no_learning_signal(StepSample(step=7))  # nothing says: judged as before


@pytest.mark.parametrize("seed", range(5))
def test_a_collapse_of_entropy_and_reward_spread_with_flat_reward_trips_within_8_steps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams.stream, "__defaults__", (streams.Curves(), 80, seed))
    ((name, onset, tripped),) = trips(streams.collapse())
    assert name == "policy_collapse"
    assert onset == ONSET
    assert ONSET + 4 <= tripped <= ONSET + 8  # k=5 of m=8: at the earliest the 5th collapsed step


def test_a_collapse_on_negative_rewards_trips_too() -> None:
    shifted = [replace(s, reward_mean=s.reward_mean - 5, reward_max=s.reward_max - 5) for s in streams.collapse()]
    assert [name for name, _, _ in trips(shifted)] == ["policy_collapse"]


def test_a_collapse_onto_what_the_reward_pays_trips_although_the_reward_is_at_its_best() -> None:
    # one token repeated, every response paid the reward's maximum: no spread, no entropy, reward = max
    at_best = [
        replace(s, reward_mean=1.0, reward_max=1.0) if s.step >= ONSET else replace(s, reward_max=1.0)
        for s in streams.collapse()
    ]
    ((name, onset, tripped),) = trips(at_best)
    # the jump to 1.0 is a rise until it leaves the 10-step slope window, which holds the trip back; the onset is
    # still where the entropy fell, so a rollback goes to a checkpoint before the collapse
    assert (name, onset) == ("policy_collapse", ONSET)
    assert ONSET + 10 < tripped <= ONSET + 10 + 8


def test_a_collapse_onset_is_the_start_of_the_last_fall_of_entropy_not_an_earlier_dip() -> None:
    dip_then_fall = [
        replace(s, entropy=0.01) if ONSET - 15 <= s.step <= ONSET - 12 or s.step >= ONSET - 3 else s
        for s in streams.collapse()
    ]
    ((name, onset, _),) = trips(dip_then_fall)
    assert (name, onset) == ("policy_collapse", ONSET - 3)


def test_a_collapse_onset_reaches_back_at_most_a_slope_window_before_the_k_of_m_window() -> None:
    # entropy under its bound long before the spread goes: the onset is clamped to the protection horizon
    early = [replace(s, entropy=0.01) if s.step >= ONSET - 15 else s for s in streams.collapse()]
    ((name, onset, tripped),) = trips(early)
    assert name == "policy_collapse" and onset == tripped - (8 + 10) + 1 > ONSET - 15


def test_a_collapse_whose_reward_still_rises_does_not_trip() -> None:
    rising = [replace(s, reward_mean=0.3 + 0.05 * s.step) for s in streams.collapse()]
    assert trips(rising) == []


def test_a_degenerate_batch_trips_on_the_third_step() -> None:
    assert trips(streams.degenerate_batch()) == [("degenerate_batch", ONSET, ONSET + 2)]


def test_all_clipped_responses_that_still_differ_in_reward_do_not_trip() -> None:
    clipped = [replace(s, clip_ratio=1.0) if s.step >= ONSET else s for s in streams.stream()]
    assert trips(clipped) == []


# --- warm-up, latching, configuration, resume ----------------------------------------------------


def test_statistical_detectors_cannot_trip_during_the_warm_up() -> None:
    wild = [
        replace(s, grad_norm=s.grad_norm * 50, kl_loss=5.0) if s.step in range(5, 20) else s for s in streams.stream()
    ]
    assert trips(wild[:20]) == []


def test_the_warm_up_can_be_longer_but_not_shorter_than_20_steps() -> None:
    # the KL jump at 40 that trips at 42 by default is inside a 45-step warm-up: nothing trips before 46
    late = trips(streams.kl_step_change(50.0), Guardrails(parse_config({"warmupSteps": 45})))
    assert late and all(tripped > 45 for _, _, tripped in late)
    with pytest.raises(ValueError, match="warmupSteps"):
        parse_config({"warmupSteps": 19})


def test_a_trip_is_latched_with_its_onset_after_the_pathology_ends() -> None:
    short = [replace(s, kl_loss=s.kl_loss * 50) if ONSET <= s.step < ONSET + 4 else s for s in streams.stream()]
    g = Guardrails()
    for s in short:
        states = {st.name: st for st in g.observe(s)}
    assert (states["kl_runaway"].status.value, states["kl_runaway"].onset_step) == ("tripped", ONSET)
    assert states["kl_runaway"].step == 80


def test_a_disabled_detector_never_trips() -> None:
    g = Guardrails(parse_config({"detectors": {"kl_runaway": {"enabled": False}}}))
    assert trips(streams.kl_step_change(50.0), g) == []
    assert "kl_runaway" not in {s.name for s in g.states.values()}


def test_thresholds_come_from_the_configuration() -> None:
    g = Guardrails(parse_config({"detectors": {"kl_runaway": {"factor": 4, "k": 1, "m": 1}}}))
    assert trips(streams.kl_step_change(5.0), g) == [("kl_runaway", ONSET, ONSET)]


def test_a_resumed_attempt_restores_its_baselines_and_skips_the_warm_up() -> None:
    first = Guardrails()
    samples = streams.kl_step_change(50.0)
    trips(samples[:30], first)
    baselines = first.baselines()
    assert set(baselines) == set(STATISTICAL)
    resumed = Guardrails()
    resumed.restore(baselines)
    # resumed at step 31: the KL jump at 40 is caught at 42, as without the restart
    assert trips(samples[30:], resumed) == [("kl_runaway", ONSET, ONSET + 2)]
    # and without the restored baselines the attempt would still be warming up at step 42
    assert trips(samples[30:], Guardrails()) == []


def test_a_resumed_attempt_with_healthy_steps_trips_nothing() -> None:
    samples = streams.entropy_drop_while_reward_rises()
    first = Guardrails()
    trips(samples[:30], first)
    resumed = Guardrails()
    resumed.restore(first.baselines())
    assert trips(samples[30:], resumed) == []


def test_malformed_restored_baselines_are_ignored() -> None:
    g = Guardrails()
    g.restore({"kl_runaway": {"median": "x"}, "policy_collapse": [1, 2], "degenerate_batch": {"rewardStd": -1.0}})
    assert g.baselines() == {}
