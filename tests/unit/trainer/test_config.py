"""grpo-train's config: verl 0.9.1 defaults + our defaults + the rendered verl.yaml + derived values."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from grpo_trainer.cli import main, parse_dry_run
from grpo_trainer.config import build_config, resolve_max_model_len
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.worker_setup import SETUP_HOOK
from omegaconf import DictConfig


def _dry_run_summary(capsys: pytest.CaptureFixture[str], path: Path, *overrides: str) -> dict:
    assert main(["--config_path", str(path), "--dry-run", *overrides]) == 0
    merged, summary = parse_dry_run(capsys.readouterr().out)
    assert merged["actor_rollout_ref"]  # the whole merged verl config comes first
    return summary


def test_dry_run_on_reference_example_yields_the_grpo_values(
    reference_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    s = _dry_run_summary(capsys, reference_yaml)
    assert not ray.is_initialized()  # --dry-run never starts Ray
    v = s["verl"]
    assert v["algorithm.adv_estimator"] == "grpo"
    assert v["actor_rollout_ref.actor.use_kl_loss"] is True
    assert v["actor_rollout_ref.actor.kl_loss_coef"] == 0.001
    assert v["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert v["actor_rollout_ref.rollout.n"] == 8
    assert v["actor_rollout_ref.rollout.temperature"] == 0.7
    assert v["actor_rollout_ref.rollout.top_p"] == 0.9
    assert v["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 2
    assert v["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.7
    assert v["actor_rollout_ref.rollout.enable_chunked_prefill"] is True
    assert v["actor_rollout_ref.rollout.max_num_batched_tokens"] == 16384
    # (1024 + 2048) * 1.2 = 3686, above the model's 3072: clamped
    assert v["actor_rollout_ref.rollout.max_model_len"] == 3072
    assert s["max_model_len"] == {
        "requested": 3686,
        "model_max_position_embeddings": 3072,
        "value": 3072,
        "clamped": True,
    }
    # validation off, but a readable val file is still planned
    assert v["trainer.val_before_train"] is False
    assert v["trainer.test_freq"] == -1
    assert v["data.train_files"] == ["/checkpoints/data/train.parquet"]
    assert v["data.val_files"] == ["/checkpoints/data/val.generated.parquet"]
    # the length reward manager, through verl 0.9.1's importlib source
    assert v["reward.reward_manager.source"] == "importlib"
    assert v["reward.reward_manager.name"] == "LengthRewardManager"
    assert v["reward.reward_manager.module.path"] == "pkg://grpo_trainer.reward.length"
    assert "grpo" in v["trainer.logger"] and "wandb" not in v["trainer.logger"]
    env = s["ray_runtime_env"]
    assert env["worker_process_setup_hook"] == SETUP_HOOK
    assert yaml.safe_load(env["env_vars"]["GRPO_ROLE_RESOURCES"]) == {
        "actor": "grpo.dev/actor",
        "rollout": "grpo.dev/rollout",
        "reward": "grpo.dev/reward",
    }
    assert env["env_vars"]["GRPO_JOB_NAME"] == "qwen2-7b-length"


def test_clamping_max_model_len_logs_a_warning(reference_yaml: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        build_config(str(reference_yaml))
    assert any("clamped to 3072" in r.getMessage() for r in caplog.records)


def test_max_model_len_is_factor_times_lengths_below_the_model_limit() -> None:
    r = resolve_max_model_len(1024, 2048, 1.2, 32768, None)
    assert (r.value, r.clamped) == (3686, False)
    r = resolve_max_model_len(1024, 2048, 1.2, 32768, 40000)  # explicit value is clamped too
    assert (r.value, r.clamped) == (32768, True)


def test_nested_and_flat_keys_merge_alike(tmp_path: Path, model_dir: Path, verl_defaults: DictConfig) -> None:
    model = model_dir
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        f"actor_rollout_ref.model.path: {model}\nactor_rollout_ref.rollout.name: vllm\nactor_rollout_ref.rollout.n: 4\n"
    )
    nested = tmp_path / "nested.yaml"
    nested.write_text(f"actor_rollout_ref:\n  model: {{path: {model}}}\n  rollout:\n    name: vllm\n    n: 4\n")
    a = build_config(str(flat), defaults=verl_defaults).verl
    b = build_config(str(nested), defaults=verl_defaults).verl
    assert a == b
    assert a.actor_rollout_ref.rollout.n == 4


def test_unknown_verl_key_is_refused_naming_the_key(tmp_path: Path, model_dir: Path, verl_defaults: DictConfig) -> None:
    model = model_dir
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {model}\nactor_rollout_ref.rollout.temprature: 0.7\n")
    with pytest.raises(
        GrpoConfigError,
        match=r"actor_rollout_ref\.rollout\.temprature.*did you mean "
        r"actor_rollout_ref\.rollout\.temperature",
    ):
        build_config(str(cfg), defaults=verl_defaults)


def test_legacy_reward_manager_key_is_refused(tmp_path: Path, model_dir: Path, verl_defaults: DictConfig) -> None:
    # verl 0.9.1 composes reward_model.* but main_ppo never reads it: a silent no-op we refuse
    model = model_dir
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {model}\nreward_model.reward_manager: naive\n")
    with pytest.raises(GrpoConfigError, match=r"reward_model\.reward_manager.*silently ignores"):
        build_config(str(cfg), defaults=verl_defaults)


def test_plus_prefix_adds_keys_to_free_form_mappings(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    model = model_dir
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {model}\n")
    key = "actor_rollout_ref.model.override_config.attn_implementation"
    with pytest.raises(GrpoConfigError, match=r"\+actor_rollout_ref"):
        build_config(str(cfg), [f"{key}=sdpa"], defaults=verl_defaults)
    built = build_config(str(cfg), [f"+{key}=sdpa"], defaults=verl_defaults)
    assert built.verl.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


def test_user_values_win_over_our_validation_defaults(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    model = model_dir
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {model}\ntrainer.test_freq: 5\n")
    assert build_config(str(cfg), defaults=verl_defaults).verl.trainer.test_freq == 5


def test_unknown_grpo_setting_is_refused(tmp_path: Path, model_dir: Path, verl_defaults: DictConfig) -> None:
    cfg = tmp_path / "v.yaml"
    cfg.write_text("grpo:\n  maxModelLenFactr: 1.5\n")
    with pytest.raises(GrpoConfigError, match=r"grpo\.maxModelLenFactr"):
        build_config(str(cfg), defaults=verl_defaults)


def test_dry_run_without_model_dir_warns_but_real_run_refuses(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {tmp_path / 'absent'}\n")
    built = build_config(str(cfg), strict=False, defaults=verl_defaults)
    assert built.max_model_len.model_limit is None and built.warnings
    with pytest.raises(GrpoConfigError, match=r"config\.json"):
        build_config(str(cfg), strict=True, defaults=verl_defaults)


def test_cli_reports_config_errors_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "v.yaml"
    cfg.write_text("trainer.no_such_key: 1\n")
    assert main(["--config_path", str(cfg), "--dry-run"]) == 2
    assert "trainer.no_such_key" in capsys.readouterr().err


def test_dry_run_fails_on_a_config_verl_itself_rejects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # verl's validate_config runs on --dry-run too: no micro batch size is an error verl raises
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 4096}')
    cfg = tmp_path / "v.yaml"
    cfg.write_text(f"actor_rollout_ref.model.path: {model}\nactor_rollout_ref.rollout.name: vllm\n")
    assert main(["--config_path", str(cfg), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "verl 0.9.1 rejects the config" in err and "ppo_micro_batch_size" in err


def test_disaggregated_placement_needs_verls_separate_async_mode(reference_yaml: Path) -> None:
    with pytest.raises(GrpoConfigError, match="separate_async"):
        build_config(str(reference_yaml), ["trainer.v1.trainer_mode=sync"])


def test_parse_dry_run_refuses_output_that_is_not_a_dry_run() -> None:
    with pytest.raises(ValueError, match="merged verl config header"):
        parse_dry_run("# resolved GRPO values\nmax_model_len: 1\n")


@pytest.mark.slow
def test_grpo_trains_own_info_lines_show_although_verl_sets_the_root_logger_to_warning(reference_yaml: Path) -> None:
    """In a fresh interpreter, as on the cluster: importing verl configures logging before main() runs."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "grpo_trainer.cli", "--config_path", str(reference_yaml), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "grpo-train: config validated by verl in" in out.stderr  # logged after verl is imported


def test_a_reward_model_in_a_pool_of_its_own_is_never_put_to_sleep(
    tmp_path: Path, model_dir: Path, verl_defaults: DictConfig
) -> None:
    # verl 0.9.1 sleeps it as it starts and never wakes it on this path: the first step would wait forever
    cfg = tmp_path / "v.yaml"
    cfg.write_text(
        f"actor_rollout_ref.model.path: {model_dir}\nreward.reward_model.enable: true\n"
        f"reward.reward_model.model_path: {model_dir}\ngrpo.reward.type: model\n"
    )
    key = "reward.reward_model.rollout.free_cache_engine"
    shared = build_config(str(cfg), defaults=verl_defaults).verl
    assert shared.reward.reward_model.rollout.free_cache_engine is True  # colocated: verl wakes it per step
    own = build_config(str(cfg), ["reward.reward_model.enable_resource_pool=true"], defaults=verl_defaults).verl
    assert own.reward.reward_model.rollout.free_cache_engine is False
    forced = build_config(
        str(cfg), ["reward.reward_model.enable_resource_pool=true", f"{key}=true"], defaults=verl_defaults
    ).verl
    assert forced.reward.reward_model.rollout.free_cache_engine is False
