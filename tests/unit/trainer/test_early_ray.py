"""Ray and the TaskRunner started before the driver imports verl (grpo_trainer.startup.ray_start): the runtime_env
grpo-train computes without torch is verl's own, the configs for which it cannot be are refused by name, and
an early Ray that turns out different from verl's, or a config verl rejects, leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.startup import ray_start
from grpo_trainer.startup.task_runner import EarlyTaskRunner
from omegaconf import DictConfig, OmegaConf, open_dict

ROOT = Path(__file__).resolve().parents[3]

# The driver's steps before ray.init, in a fresh process as in a pod (the CLI's module, the config built from a
# user's file, the TaskRunner's class): nothing heavy imported by then, Ray's uv hook off as verl would have it;
# then ours against verl's own. One process judges every variant (its environment applied on top of the process's
# own, then taken back): ours for all of them first, then verl imported once for its side.
_COMPARE = """
import json, os, sys
from grpo_trainer import cli
from grpo_trainer.startup import ray_start
from grpo_trainer.config import build_config

def under(env, compute):
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return compute()
    finally:
        os.environ.clear()
        os.environ.update(saved)

config, variants = sys.argv[1], json.loads(sys.argv[2])
built, seen = {}, {}
for name, (transfer_queue, env) in variants.items():
    def ours(transfer_queue=transfer_queue, name=name):
        built[name] = build_config(config, ["trainer.use_v1=true", "transfer_queue.enable=" + transfer_queue,
                                            "ray_kwargs.ray_init.num_cpus=3"])
        cli.task_runner_class(built[name].verl)
        return {"ours": ray_start.ray_init_kwargs(ray_start.ppo_runtime_env(os.environ), built[name].verl),
                "blockers": ray_start.early_start_blockers(built[name].verl, os.environ,
                                                           ray_start.installed_torch_version())}
    seen[name] = under(env, ours)
heavy_before = sorted(m for m in ("torch", "verl", "transformers", "tensordict") if m in sys.modules)
import ray._private.ray_constants as ray_constants
uv_hook = ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV
for name, (_, env) in variants.items():
    seen[name]["verl"] = under(env, lambda name=name: ray_start.verl_ray_init_kwargs(built[name].verl))
print(json.dumps({"heavy_before": heavy_before, "uv_hook": uv_hook, "variants": seen}))
"""

# name -> (transfer_queue.enable, the driver's environment)
VARIANTS = {
    "plain": ("true", {}),
    # set in the driver's environment: verl leaves it out (the workers inherit it); forwarded ones kept
    "driver-env-set": ("true", {"NCCL_DEBUG": "INFO", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "7",
                                "VERL_FULL_DETERMINISM": "0"}),
    # a Ray job submitted with a working_dir: verl then sets none
    "job-working-dir": ("true", {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"working_dir": "/job"}})}),
    "transfer-queue-off": ("false", {}),
}


def _user_config(directory: Path) -> Path:
    """The reference job's verl config, its model a directory with a config.json."""
    model = directory / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 3072}))
    config = directory / "verl.yaml"
    config.write_text(
        (Path(__file__).parent / "fixtures" / "reference-verl.yaml").read_text()
        .replace("/models/Qwen2-7B-Instruct", str(model))
        .replace("/checkpoints", str(directory / "ckpt"))
    )
    return config


@pytest.fixture()
def user_config(tmp_path: Path) -> Path:
    return _user_config(tmp_path)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every variant judged in one fresh process (as a pod's driver; verl imported once, after ours)."""
    config = _user_config(tmp_path_factory.mktemp("early-ray"))
    unset = ("NCCL_DEBUG", "PYTHONHASHSEED", "TOKENIZERS_PARALLELISM", "RAY_ENABLE_UV_RUN_RUNTIME_ENV")
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    environ |= {"PYTHONPATH": f"{ROOT / 'trainer'}:{ROOT / 'operator'}"}
    out = subprocess.run(
        [sys.executable, "-c", _COMPARE, str(config), json.dumps(VARIANTS)],
        env=environ, capture_output=True, text=True, check=True, timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_nothing_heavy_is_imported_to_compute_rays_start_and_rays_uv_hook_is_off(compared: dict[str, Any]) -> None:
    assert compared["heavy_before"] == []  # nothing heavy imported to compute it: the point of starting early
    assert compared["uv_hook"] is False  # as verl's __init__ sets it, although Ray was imported first


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["plain", "driver-env-set", "job-working-dir"])
def test_the_runtime_env_computed_without_torch_is_verls(compared: dict[str, Any], variant: str) -> None:
    seen = compared["variants"][variant]
    assert seen["blockers"] == []
    assert seen["ours"] == seen["verl"]


@pytest.mark.slow
def test_transfer_queue_flag_follows_the_config_as_in_verl(compared: dict[str, Any]) -> None:
    seen = compared["variants"]["transfer-queue-off"]
    assert seen["ours"] == seen["verl"]
    assert "TRANSFER_QUEUE_ENABLE" not in seen["ours"]["runtime_env"]["env_vars"]


def test_ray_init_kwargs_is_what_run_ppo_passes_to_ray_init(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the merge itself checked against verl's run_ppo, stopped right after its ray.init
    import verl.trainer.main_ppo as main_ppo

    class Stop(Exception):
        pass

    passed: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        passed.update(kwargs)
        raise Stop

    monkeypatch.setattr(main_ppo.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(main_ppo.ray, "init", init)
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.transfer_queue.enable = True
        cfg.ray_kwargs.ray_init.num_cpus = 5
        cfg.ray_kwargs.ray_init.runtime_env.env_vars = {"MY_VAR": "1", "NCCL_DEBUG": "TRACE"}
    with pytest.raises(Stop):
        main_ppo.run_ppo(cfg, task_runner_class=None)
    assert passed == ray_start.verl_ray_init_kwargs(cfg)
    assert passed["runtime_env"]["env_vars"]["NCCL_DEBUG"] == "TRACE"  # the user's setting wins


# ----------------------------------------------------------------- configs that start as before


def _v1(verl_defaults: DictConfig) -> DictConfig:
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.trainer.use_v1 = True
    return cfg


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("actor_rollout_ref.actor.strategy", "megatron", "megatron"),
        ("global_profiler.tool", "nsys", "global_profiler.tool=nsys"),
        ("actor_rollout_ref.rollout.full_determinism", True, "full_determinism"),
        ("trainer.logger", ["console", "rl_insight"], "rl_insight"),
        ("trainer.use_v1", False, "trainer.use_v1"),
    ],
)
def test_a_config_whose_ray_start_verl_must_compute_starts_as_before(
    verl_defaults: DictConfig, key: str, value: Any, named: str
) -> None:
    cfg = _v1(verl_defaults)
    OmegaConf.update(cfg, key, value, force_add=True)
    (blocker,) = ray_start.early_start_blockers(cfg, {}, "2.11.0+cu130")
    assert named in blocker


def test_the_reward_models_determinism_counts_only_when_it_runs(verl_defaults: DictConfig) -> None:
    cfg = _v1(verl_defaults)
    OmegaConf.update(cfg, "reward.reward_model.rollout.full_determinism", True, force_add=True)
    assert ray_start.early_start_blockers(cfg, {}, "2.11.0") == []
    OmegaConf.update(cfg, "reward.reward_model.enable", True, force_add=True)
    assert ray_start.early_start_blockers(cfg, {}, "2.11.0") != []


@pytest.mark.parametrize(
    ("environ", "torch_version", "named"),
    [
        ({"GRPO_EARLY_RAY": "0"}, "2.11.0", "GRPO_EARLY_RAY=0"),
        ({"GRPO_WARM_START": "0"}, "2.11.0", "GRPO_WARM_START=0"),
        ({"TLLM_DISABLE_NVLS_MNNVL": "1"}, "2.11.0", "GB200"),
        ({}, "2.9.1+rocm6.4", "ROCm"),
        ({}, None, "unknown"),
    ],
)
def test_the_host_decides_too(verl_defaults: DictConfig, environ: dict[str, str], torch_version: str | None,
                              named: str) -> None:
    (blocker,) = ray_start.early_start_blockers(_v1(verl_defaults), environ, torch_version)
    assert named in blocker


# ----------------------------------------------------------------- giving an early Ray up


class Probe:
    def ping(self) -> str:
        return "pong"


@pytest.fixture(autouse=True)
def _own_local_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    # a Ray of this test's own: ray.init would otherwise join a cluster another test started with `ray start`
    # (its address file outlives it), where num_cpus may not be given
    monkeypatch.setenv("RAY_ADDRESS", "local")
    # Ray's workers cannot import this test module: the probe class travels by value
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _Created:
    """Stands in for the Ray actor class: .options(...).remote(...) gives a handle."""

    def options(self, **options: Any) -> _Created:
        return self

    def remote(self, *args: Any) -> str:
        return "handle"


def test_an_actor_given_up_is_killed_not_only_disconnected(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a KubeRay cluster ray.shutdown() only disconnects the driver: the TaskRunner must be removed itself
    import ray

    killed: list[Any] = []
    monkeypatch.setattr(ray, "kill", killed.append)
    runner = EarlyTaskRunner(_Created(), {})
    runner.create()
    runner.discard()
    runner.discard()
    assert killed == ["handle"]
    assert runner.handle is None


def test_giving_up_removes_transfer_queues_starter_without_waiting_for_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a config verl rejects is reported at once, not after TransferQueue's 20-30 s start
    import ray

    stops: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_start, "stop_transfer_queue", lambda **kwargs: stops.append(kwargs))
    monkeypatch.setattr(ray, "kill", lambda handle: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    runner = EarlyTaskRunner(_Created(), {})
    runner.create()
    ray_start.give_up(ray_start.EarlyRay(init_kwargs={}, runner=runner))
    assert stops == [{"graceful": False}]


@pytest.mark.slow
def test_an_early_ray_unlike_verls_is_given_up_and_run_ppo_starts_its_own(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    cfg = _v1(verl_defaults)
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.num_cpus = 1
        cfg.ray_kwargs.ray_init.include_dashboard = False
    created: list[str] = []
    runner = EarlyTaskRunner(ray.remote(num_cpus=0)(Probe), {}, on_created=lambda: created.append("tq"))
    early = ray_start.start(cfg, runner, {})
    try:
        assert early is not None and ray.is_initialized()
        first = runner.handle
        assert ray.get(first.ping.remote()) == "pong"
        assert "grpo-train: ray init kwargs: " in capsys.readouterr().out
        # verl would have started Ray otherwise (a verl whose settings changed): nothing of the early start stays
        monkeypatch.setattr(ray_start, "verl_ray_init_kwargs", lambda config: {**early.init_kwargs, "num_cpus": 2})
        assert ray_start.confirm(early, cfg) is None
        assert "given up" in capsys.readouterr().out
        assert not ray.is_initialized()
        assert runner.handle is None
        # what run_ppo does next: its own Ray, and a new actor through the same runner
        ray.init(num_cpus=1, include_dashboard=False)
        assert ray.get(runner.remote().ping.remote()) == "pong"
        assert created == ["tq", "tq"]
    finally:
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(
    "failure",
    [
        GrpoConfigError("verl 0.9.1 rejects the config: data.train_batch_size must be positive"),
        ImportError("verl failed to import: libcudart.so.13 not found"),
    ],
    ids=["verl-rejects-the-config", "verl-fails-to-import"],
)
def test_a_failure_after_the_early_start_leaves_no_ray_behind(
    user_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], failure: Exception
) -> None:
    import ray
    from grpo_trainer import cli

    created: list[bool] = []
    monkeypatch.setattr(
        cli, "task_runner_class",
        lambda _config, before_run: EarlyTaskRunner(
            ray.remote(num_cpus=0)(Probe), {}, before_run=before_run, on_created=lambda: created.append(True)
        ),
    )

    def fails(config: Any) -> None:
        raise failure

    monkeypatch.setattr(cli, "validate_with_verl", fails)
    argv = ["--config_path", str(user_config), "ray_kwargs.ray_init.num_cpus=1",
            "+ray_kwargs.ray_init.include_dashboard=false"]
    try:
        if isinstance(failure, GrpoConfigError):
            assert cli.main(argv) == 2  # the user's error, named
            assert "data.train_batch_size must be positive" in capsys.readouterr().err
        else:
            with pytest.raises(ImportError, match="libcudart"):
                cli.main(argv)
        assert created == [True]  # the actor had been created early ...
        assert not ray.is_initialized()  # ... and went with the Ray grpo-train started
    finally:
        ray.shutdown()
