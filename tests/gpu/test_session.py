"""CPU: the device session's plan, batches and bundles (bench/gpu/session.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import tarfile
from pathlib import Path

import pytest
import run_grpo
import session


def test_the_calls_in_budget_fit_the_session_and_the_slots_are_named() -> None:
    in_budget = sum(c.expected_s for c in session.PLAN if c.in_budget)
    assert in_budget <= session.BUDGET_S
    slots = {c.name: c for c in session.PLAN if not c.in_budget}
    assert set(slots) == {"a", "b"}
    assert "bench/fit/measure.py" in slots["a"].what and "guardrail" in slots["b"].what
    table = session.plan_table()
    assert f"**{in_budget}**" in table and "not in this session's budget" in table


def test_the_unmeasured_runs_share_the_gpu_and_nothing_else() -> None:
    batch = session.unmeasured_batch(learn_steps=30, cap_s=370)
    specs = {r.spec.name: r.spec for r in batch}
    assert set(specs) == {"learn", "control", "placement", "smoke"}
    assert all(s.shared_gpu and s.timeout_s == 370 and s.kind == "ours" for s in specs.values())
    assert len({s.metrics_port for s in specs.values()}) == len(specs)
    # learning and control differ in the learning rate alone
    learn, control = specs["learn"], specs["control"]
    assert (learn.lr, control.lr) == (session.LEARNING_RATE, 0.0)
    assert {k for k in learn.__dataclass_fields__ if getattr(learn, k) != getattr(control, k)} == {
        "name",
        "lr",
        "metrics_port",
    }
    placement = next(r for r in batch if r.spec.name == "placement")
    assert placement.state_check and placement.spec.reward == "model"
    assert [n.name for n in placement.nodes] == ["head", "actor", "reward"]
    assert specs["smoke"].export


def test_guardrail_runs_take_overrides_and_record_every_step() -> None:
    runs = {r.spec.name: r.spec for r in session.guardrail_batch()}
    assert set(runs) == {"guard-lr", "guard-token", "guard-temp"}
    # 40: the detectors' 20-step warm-up leaves 20 judged steps
    assert all(s.steps == 40 and s.shared_gpu for s in runs.values())
    assert runs["guard-lr"].lr >= 1e-2 and runs["guard-token"].reward == "token"
    assert runs["guard-temp"].temperature == 0.1
    custom = session.parse_run("g:lr=3e-2,reward=token,temperature=0.5,steps=12", shared_gpu=True)
    assert (custom.name, custom.lr, custom.reward, custom.temperature, custom.steps) == ("g", 3e-2, "token", 0.5, 12)
    with pytest.raises(ValueError, match="not one of"):
        session.parse_run("g:gamma=1")


def test_the_reward_model_run_goes_beside_the_guardrail_runs_on_its_own_three_nodes() -> None:
    placement = session.placement_batch_run(450, metrics_port=9403)
    assert placement.spec.reward == "model" and placement.state_check and placement.ray_logs
    assert len(placement.nodes) == 3 and placement.spec.timeout_s == 450
    ports = {placement.spec.metrics_port} | {r.spec.metrics_port for r in session.guardrail_batch()}
    assert len(ports) == 4  # they share the machine: distinct metrics ports


def test_a_pair_is_two_timed_runs_stopped_at_the_same_wall_time() -> None:
    first, second = session.timed_pair(["stock", "ours"], 280)
    assert (first.kind, second.kind) == ("stock", "ours")
    assert first.wall_capped and second.wall_capped and first.timeout_s == second.timeout_s == 280
    assert not first.shared_gpu and first.ray_address is None  # alone, with a local Ray of its own


def test_a_start_up_ab_runs_ours_beside_ours_with_the_cuts_switched_off() -> None:
    ours, before = session.timed_pair(["ours", "ours_before"], 230)
    assert (ours.kind, ours.env) == ("ours", ())
    assert before.kind == "ours" and before.name == "ours_before"
    assert dict(before.env) == {"GRPO_VLLM_UNI": "0", "GRPO_WARM_SERVER_IMPORT": "0"}
    assert before.wall_capped and before.timeout_s == ours.timeout_s == 230
    # the same environment reaches the run's process (grpo-train reads the switches in its driver)
    assert run_grpo.run_env(before)["GRPO_VLLM_UNI"] == "0" and "GRPO_VLLM_UNI" not in run_grpo.run_env(ours)


def test_a_variant_of_ours_can_be_given_on_the_command_line() -> None:
    name, env = session.parse_variant("ours_x:GRPO_VLLM_UNI=0,GRPO_WARM_START=0")
    assert (name, env) == ("ours_x", (("GRPO_VLLM_UNI", "0"), ("GRPO_WARM_START", "0")))
    (spec,) = session.timed_pair(["ours_x"], 230, {name: env})
    assert spec.kind == "ours" and spec.env == env


@pytest.mark.parametrize("text", ["ours:GRPO_VLLM_UNI=0", "no-dash:A=1", "nocolon", "x:A"])
def test_a_malformed_variant_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--variant"):
        session.parse_variant(text)


def test_stock_fixed_is_stock_verl_with_our_log_probabilities_in_its_workers(tmp_path: Path) -> None:
    ours, stock = session.timed_pair(["ours", "stock_fixed"], 230)
    assert (stock.kind, stock.logprobs_fix, stock.env) == ("stock", True, ())
    assert (ours.kind, ours.logprobs_fix) == ("ours", False)
    with pytest.raises(ValueError, match="for stock runs"):
        run_grpo.RunSpec("x", kind="ours", logprobs_fix=True)
    with pytest.raises(ValueError, match="--variant"):
        session.parse_variant("stock_fixed:A=1")


def test_an_unknown_or_repeated_run_name_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="not ours, stock, stock_fixed or a variant"):
        session.timed_pair(["ours", "ours_typo"], 230)
    with pytest.raises(ValueError, match="twice"):
        session.timed_pair(["ours", "ours"], 230)


def test_a_stopped_timed_run_counts_by_the_steps_it_reached() -> None:
    def result(steps: int, spec: run_grpo.RunSpec) -> run_grpo.RunResult:
        return run_grpo.RunResult(
            "r",
            [],
            -9,
            280.0,
            200.0,
            True,
            [{"step": i} for i in range(1, steps + 1)],
            None,
            None,
            None,
            spec=spec.__dict__ | {},
        )

    timed = session.timed_pair(["ours"], 280)[0]
    assert result(run_grpo.MIN_TIMED_STEPS, timed).ok
    assert not result(run_grpo.MIN_TIMED_STEPS - 1, timed).ok
    assert not result(60, run_grpo.RunSpec("x", steps=60)).ok  # an ordinary run killed at its limit failed


def test_a_bundle_is_two_files_the_device_can_give_back(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "deep" / "er").mkdir(parents=True)
    (results / "learn.json").write_text("{}")
    (results / "deep" / "er" / "x.log.gz").write_bytes(b"x")
    files = session.bundle(results, tmp_path / "out", "unmeasured", {"rc": 0})
    assert len(files) <= 8
    for f in files:
        assert len(f.relative_to(tmp_path / "out").parts) <= 3  # $OUT/a/b/file at most
        assert re.fullmatch(r"[A-Za-z0-9._-]+", f.name)
    with tarfile.open(files[0]) as t:
        assert sorted(t.getnames()) == ["deep/er/x.log.gz", "learn.json"]


def test_guard_act_runs_act_on_the_token_reward_beside_a_healthy_control_and_a_cold_sampler() -> None:
    runs = {r.spec.name: r.spec for r in session.guard_act_batch(540)}
    assert set(runs) == {"guard-base", "guard-token", "guard-cold"}
    assert all(s.shared_gpu and s.reward == "token" and s.timeout_s == 540 for s in runs.values())
    env = {name: json.loads(dict(s.env)["GRPO_GUARDRAILS"]) for name, s in runs.items()}
    assert env["guard-base"]["mode"] == env["guard-token"]["mode"] == "act" and env["guard-cold"]["mode"] == "observe"
    # base saves the checkpoint the resumed attempts start from; 20 steps judged after the warm-up at least
    assert runs["guard-base"].save_freq == session.ROLLBACK_STEP and runs["guard-base"].steps >= 40
    assert runs["guard-token"].lr > runs["guard-base"].lr and runs["guard-cold"].temperature < 0.5
    assert len({s.metrics_port for s in runs.values()}) == 3


def test_guard_resume_starts_two_attempts_from_the_bases_checkpoint_with_their_learning_rates() -> None:
    runs = {r.spec.name: r.spec for r in session.guard_resume_batch(300)}
    assert set(runs) == {"guard-lr", "guard-half"}
    for spec in runs.values():
        request = json.loads(dict(spec.env)["GRPO_ROLLBACK"])
        assert spec.resume_from == "guard-base" and request["step"] == session.ROLLBACK_STEP
        assert spec.steps > session.ROLLBACK_STEP and request["attempt"] == 2
    assert json.loads(dict(runs["guard-lr"].env)["GRPO_ROLLBACK"])["learningRate"] == 0.1
    assert json.loads(dict(runs["guard-half"].env)["GRPO_ROLLBACK"])["learningRate"] == runs["guard-half"].lr / 2


def test_a_resumed_run_starts_from_a_copy_of_the_source_runs_checkpoints(tmp_path: Path) -> None:
    paths = run_grpo.Paths(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
        run_grpo.copy_checkpoints(paths.checkpoints("base"), paths.checkpoints("lr"))
    source = paths.checkpoints("base")
    (source / "global_step_25" / "actor").mkdir(parents=True)
    (source / "latest_checkpointed_iteration.txt").write_text("25")
    stale = paths.checkpoints("lr") / "global_step_40"
    stale.mkdir(parents=True)
    run_grpo.copy_checkpoints(source, paths.checkpoints("lr"))
    assert (paths.checkpoints("lr") / "global_step_25" / "actor").is_dir() and not stale.exists()
    assert (source / "global_step_25").is_dir()  # the source is left as it was
    spec = run_grpo.RunSpec("lr", env=(("GRPO_ROLLBACK", "{}"),), save_freq=5)
    assert run_grpo.run_env(spec)["GRPO_ROLLBACK"] == "{}"
    assert run_grpo.verl_keys(spec, paths)["trainer.save_freq"] == 5


def test_a_resumed_run_is_ok_with_the_steps_after_its_checkpoint() -> None:
    def result(steps: list[int], resume_from: str | None) -> run_grpo.RunResult:
        spec = dataclasses.asdict(run_grpo.RunSpec("lr", steps=40, resume_from=resume_from))
        return run_grpo.RunResult("lr", [], 0, 1.0, 1.0, False, [{"step": s} for s in steps], None, None, None, spec)

    assert result(list(range(26, 41)), "base").ok
    assert not result(list(range(26, 40)), "base").ok  # one step short
    assert not result(list(range(26, 41)), None).ok  # a fresh run owes all 40


def test_guard_collapse_is_the_single_word_reward_alone_in_act_mode() -> None:
    run = session.guard_collapse_run(450).spec
    assert run.reward == "token" and not run.shared_gpu and run.timeout_s == 450
    assert json.loads(dict(run.env)["GRPO_GUARDRAILS"])["mode"] == "act"
    assert run.steps > 20 + 10 + 8  # the warm-up, the slope window and a k-of-m window after it
    assert run.save_freq is not None and run.save_freq < 10  # a checkpoint before any onset


def test_vllms_model_info_cache_is_found_where_vllm_keeps_it() -> None:
    assert session.vllm_model_info_dir({"HOME": "/home/ray"}) == Path("/home/ray/.cache/vllm/modelinfos")
    assert session.vllm_model_info_dir({"HOME": "/h", "VLLM_CACHE_ROOT": "/cache/v"}) == Path("/cache/v/modelinfos")
    assert session.vllm_model_info_dir({"HOME": "/h", "XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/vllm/modelinfos")
    assert session.vllm_model_info_dir({"XDG_CACHE_HOME": "/xdg", "VLLM_CACHE_ROOT": "/v"}) == Path("/v/modelinfos")


@pytest.mark.parametrize("fresh", [True, False])
def test_a_fresh_model_info_run_starts_without_vllms_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: bool
) -> None:
    cache = tmp_path / "vllm-cache"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache))
    seen: list[bool] = []

    def run(spec: run_grpo.RunSpec, paths: run_grpo.Paths, alone: bool = True) -> run_grpo.RunResult:
        seen.append((cache / "modelinfos").exists())
        (cache / "modelinfos").mkdir(parents=True, exist_ok=True)  # what the run's vLLM server leaves behind
        (cache / "modelinfos" / "qwen2.json").write_text("{}")
        return run_grpo.RunResult(spec.name, [], 0, 1.0, None, False, [], None, None, None)

    monkeypatch.setattr(session.run_grpo, "run", run)
    monkeypatch.setattr(session.run_grpo, "versions", dict)
    monkeypatch.setattr(session.run_grpo, "save_result", lambda result, paths, out: None)
    specs = session.timed_pair(["ours", "ours_late_model_info"], 100.0, {})
    session.run_timed(specs, run_grpo.Paths(tmp_path / "work"), tmp_path / "out", fresh_model_info=fresh)
    assert seen == ([False, False] if fresh else [False, True])
