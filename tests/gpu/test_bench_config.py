"""CPU: the GPU benchmark gives grpo-train and stock main_ppo the same, verl-valid settings."""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import run_grpo
from omegaconf import OmegaConf

STEPS = 11
OURS = run_grpo.RunSpec("ours", steps=STEPS)
STOCK = run_grpo.RunSpec("stock", kind="stock", steps=STEPS)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> run_grpo.Paths:
    p = run_grpo.Paths(tmp_path_factory.mktemp("bench-gpu"))
    run_grpo.prepare_inputs(p, STEPS, reward_model=True)
    return p


def test_tiny_model_has_a_chat_template_and_qwen2_config(paths: run_grpo.Paths) -> None:
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(paths.model)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    config = AutoConfig.from_pretrained(paths.model)
    assert config.model_type == "qwen2" and config.vocab_size == len(tok)
    assert tok.eos_token_id == config.eos_token_id


def test_the_reward_model_is_a_one_label_qwen2_classifier_with_the_policys_tokenizer(paths: run_grpo.Paths) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(paths.reward_model)
    assert config.architectures == ["Qwen2ForSequenceClassification"] and config.num_labels == 1
    rm_tok, tok = AutoTokenizer.from_pretrained(paths.reward_model), AutoTokenizer.from_pretrained(paths.model)
    assert rm_tok.get_vocab() == tok.get_vocab() and rm_tok.chat_template == tok.chat_template


def test_prompts_cover_every_step(paths: run_grpo.Paths) -> None:
    rows = paths.prompts.read_text().splitlines()
    assert len(rows) >= run_grpo.PROMPTS_PER_STEP * STEPS


def test_stock_overrides_compose_with_verl_and_match_what_grpo_train_derives(paths: run_grpo.Paths) -> None:
    from grpo_trainer.config import build_config, verl_config_dir
    from grpo_trainer.verl_validation import validate_with_verl
    from hydra import compose, initialize_config_dir

    overrides = run_grpo.stock_overrides(STOCK, paths)  # composes verl's defaults itself: outside hydra's context
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        stock = compose(config_name="ppo_trainer", overrides=overrides)
    validate_with_verl(stock)
    ours = build_config(str(run_grpo.write_config(OURS, paths)), strict=True).verl
    differing = dict(
        _differences(OmegaConf.to_container(stock, resolve=True), OmegaConf.to_container(ours, resolve=True))
    )
    assert set(differing) == {
        "trainer.experiment_name",  # 'stock' / 'ours'
        "actor_rollout_ref.rollout.trace.experiment_name",  # interpolates trainer.experiment_name
        "trainer.default_local_dir",  # checkpoints-stock / checkpoints-ours
        "trainer.logger",  # ours adds its tracking backend
        "ray_kwargs.ray_init.runtime_env.env_vars",  # ours: its worker hook and settings
        "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook",
        "data.train_files",  # each run converts the prompts into its own folder (runs may overlap)
        "data.val_files",
        # ours runs vLLM's worker in its EngineCore process (grpo_trainer.startup.vllm_executor); stock keeps
        # verl's "mp", a difference being measured, not a derived value stock needs to run the same job
        "actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend",
    }
    assert differing["trainer.logger"] == (["console"], ["console", "grpo"])
    assert differing["actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend"] == (None, "uni")


def test_stock_fixed_gets_the_log_probability_hook_and_nothing_else_of_ours(paths: run_grpo.Paths) -> None:
    from grpo_trainer.config import verl_config_dir
    from hydra import compose, initialize_config_dir

    fixed = dataclasses.replace(STOCK, logprobs_fix=True)
    plain, with_fix = run_grpo.stock_overrides(STOCK, paths), run_grpo.stock_overrides(fixed, paths)
    assert with_fix[: len(plain)] == plain
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=with_fix)
    hook = OmegaConf.select(composed, "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook")
    assert hook == "grpo_trainer.token_logprobs.setup_worker"
    module, _, function = hook.rpartition(".")
    assert callable(getattr(importlib.import_module(module), function))


def _differences(a: Any, b: Any, prefix: str = "") -> Iterator[tuple[str, tuple[Any, Any]]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _differences(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))
    elif a != b:
        yield prefix, (a, b)


def test_hydra_values_are_quoted_where_hydra_would_misread_them() -> None:
    assert run_grpo.hydra_value("pkg://a.b") == "'pkg://a.b'"
    assert run_grpo.hydra_value([True, 1, 0.5, None]) == "[true,1,0.5,null]"


def test_report_reads_result_jsons_and_gzipped_logs_alike(tmp_path) -> None:
    import gzip
    import json

    def log_lines(times: tuple[float, ...], ref: float) -> list[str]:
        return [
            f"(TaskRunnerV1 pid=1) step:{i} - timing_s/step:{t} - timing_s/ref:{ref}" for i, t in enumerate(times, 1)
        ]

    ours, stock = log_lines((40.0, 5.0, 7.0), 0.5), log_lines((30.0, 4.0, 6.0), 0.4)
    with gzip.open(tmp_path / "ours.log.gz", "wt") as f:
        f.write("\n".join(["$ grpo-train", *ours]) + "\n")
    (tmp_path / "stock.log").write_text("\n".join(stock) + "\n")
    (tmp_path / "ours.json").write_text(
        json.dumps(
            {"steps": [{"step": i, "timing_s/step": t, "perf/throughput": None} for i, t in ((1, 40), (2, 5), (3, 7))]}
        )
    )
    from_logs = run_grpo.report(tmp_path / "ours.log.gz", tmp_path / "stock.log")
    from_json = run_grpo.report(tmp_path / "ours.json", tmp_path / "stock.log")
    assert "median 1.200 (6.000 s / 5.000 s), mean 1.200" in from_logs
    assert from_logs.splitlines()[:2] == from_json.splitlines()[:2]
    assert "| ref | 0.500 | 0.400 | 1.250 |" in from_logs
    assert "| ref | - | 0.400 | - |" in from_json


def _session_specs() -> list[run_grpo.RunSpec]:
    import session

    batch = session.unmeasured_batch() + session.guardrail_batch()
    return [r.spec for r in batch] + session.timed_pair(["ours", "stock"], 280)


@pytest.mark.parametrize("spec", _session_specs(), ids=lambda s: s.name)
def test_every_run_of_the_session_builds_a_config_verl_accepts(spec: run_grpo.RunSpec, paths: run_grpo.Paths) -> None:
    """What grpo-train --dry-run checks on the device: our builder (the reward function imported, the
    reward model's config.json read) and verl 0.9.1's validate_config, for every run the session makes."""
    import dataclasses

    from grpo_trainer.config import build_config
    from grpo_trainer.verl_validation import validate_with_verl

    twin = dataclasses.replace(spec, kind="ours")  # a stock run's keys are its ours twin's, checked above
    built = build_config(str(run_grpo.write_config(twin, paths)), strict=True)
    validate_with_verl(built.verl)
    cfg = built.verl
    assert cfg.actor_rollout_ref.actor.optim.lr == spec.lr
    assert cfg.trainer.total_training_steps == spec.steps
    if spec.temperature is not None:
        assert cfg.actor_rollout_ref.rollout.temperature == spec.temperature
    if spec.shared_gpu:
        assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes == run_grpo.SHARED_KV_CACHE_BYTES
        assert cfg.actor_rollout_ref.rollout.agent.num_workers == run_grpo.SHARED_PROCESSES
        assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == run_grpo.SHARED_PROCESSES
    if spec.reward == "token":
        assert cfg.reward.custom_reward_function.path == str(run_grpo.TOKEN_REWARD)
    if spec.reward == "model":
        rm = cfg.reward.reward_model
        assert rm.enable and rm.enable_resource_pool and rm.model_path == str(paths.reward_model)
        assert rm.rollout.tensor_model_parallel_size == 1 and rm.n_gpus_per_node == 1
    assert built.settings.metrics.steps_file == str(paths.steps_file(spec.name))
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env["GRPO_METRICS_STEPS_FILE"] == str(paths.steps_file(spec.name))
    assert env["GRPO_ROLE_RESOURCES"] == json.dumps(dict(spec.role_resources), sort_keys=True)


def test_a_private_shared_run_starts_ray_without_a_dashboard_and_a_joining_run_passes_no_start_options(
    paths: run_grpo.Paths,
) -> None:
    private = run_grpo.verl_keys(run_grpo.RunSpec("a", shared_gpu=True), paths)
    joining = run_grpo.verl_keys(run_grpo.RunSpec("b", shared_gpu=True, ray_address="127.0.0.1:1"), paths)
    assert private["+ray_kwargs.ray_init.include_dashboard"] is False
    # ray.init refuses start options (object store size, dashboard) when it joins a running cluster
    assert not [k for k in joining if k.startswith("+ray_kwargs.ray_init.")]
    assert run_grpo.run_env(run_grpo.RunSpec("a"))["RAY_ADDRESS"] == "local"
    assert run_grpo.run_env(run_grpo.RunSpec("b", ray_address="127.0.0.1:1"))["RAY_ADDRESS"] == "127.0.0.1:1"


def test_run_specs_refuse_what_a_stock_run_cannot_do() -> None:
    with pytest.raises(ValueError, match="stock"):
        run_grpo.RunSpec("s", kind="stock", reward="token")
    with pytest.raises(ValueError, match="name"):
        run_grpo.RunSpec("a/b")
