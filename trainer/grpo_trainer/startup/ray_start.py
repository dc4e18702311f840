"""Ray and the TaskRunner actor, started before the driver imports verl (issue 17.3).

verl 0.9.1's `run_ppo` starts Ray only once the driver has imported verl (torch, tensordict, transformers:
13-14 s on the H200 machine, bench/gpu/RESULTS.md), and the TaskRunner's process then imports the same again
(17-19 s) before the run can begin: one after the other. grpo-train starts Ray with the runtime_env verl would
give it, and creates the TaskRunner, first; the driver's imports, verl's validation and the data preparation
then run while the TaskRunner's process starts. `run_ppo` finds Ray initialized and gets the actor already
created (grpo_trainer.startup.task_runner.EarlyTaskRunner.create).

The runtime_env is verl's `get_ppo_ray_runtime_env`, and computing it imports torch. `ppo_runtime_env` is our
reading of it for the configs where torch plays no part (`early_start_blockers` names the others, which start
as before). Once the driver has imported verl, `confirm` computes verl's own; should the two differ, the early
Ray is given up (actor removed, Ray shut down) and `run_ppo` starts Ray and the TaskRunner itself: slower,
never different in its arguments. Ray is now imported before verl, so the one Ray setting verl's own
`__init__` makes before anything imports Ray (RAY_ENABLE_UV_RUN_RUNTIME_ENV) is made here, the same way. A local
Ray (the GPU bench; not a KubeRay cluster, whose pods have environments of their own) no longer inherits the
variables importing verl sets in the driver (tensordict's LAZY_LEGACY_OP and the like): each worker that
imports verl sets them itself, as on a cluster. GRPO_EARLY_RAY=0 (or GRPO_WARM_START=0): verl starts Ray after
the driver's imports, as before.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_trainer.startup.task_runner import WARM_START_ENV, EarlyTaskRunner
from grpo_trainer.startup.transfer_queue_start import stop_transfer_queue

# verl/__init__.py sets this default before anything imports Ray (Ray reads it once, at import): under `uv run`,
# Ray's uv hook would rewrite verl's working_dir=None and fail in ray.init. grpo-train imports Ray before verl
# now, so the default is set here, where the driver's Ray path begins, exactly as verl sets it
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

log = logging.getLogger(__name__)

EARLY_RAY_ENV = "GRPO_EARLY_RAY"
# the bench's start-up breakdown finds "ray init kwargs:" (verl prints it when run_ppo starts Ray)
STARTED_LINE = "grpo-train: ray init kwargs: "
SKIPPED_LINE = "grpo-train: ray not started before verl's imports: "
GIVEN_UP_LINE = "grpo-train: ray started early given up, verl starts it: "

# verl 0.9.1's PPO_RAY_RUNTIME_ENV["env_vars"] (verl/trainer/constants_ppo.py) on a CUDA host without its
# GB200 opt-in; `confirm` compares with verl's own at run time, tests/unit/trainer/test_early_ray.py in CI
PPO_ENV_VARS: dict[str, str] = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "HCCL_HOST_SOCKET_PORT_RANGE": "auto",
    "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
    "HSA_NO_SCRATCH_RECLAIM": "1",
}
# verl forwards these from the driver's environment when it builds the runtime_env: always ("0" when unset),
# and only when set
ALWAYS_FORWARDED = ("VERL_FULL_DETERMINISM", "VLLM_BATCH_INVARIANT", "VERL_RL_INSIGHT_ENABLE")
FORWARDED_WHEN_SET = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "FLASH_ATTENTION_DETERMINISTIC",
                      "NCCL_DETERMINISTIC", "NCCL_ALGO")
# ray._private.runtime_env.constants: set by Ray's job submission
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def early_start_blockers(config: Any, environ: Mapping[str, str], torch_version: str | None) -> list[str]:
    """Pure: why Ray cannot start before verl is imported for this config (empty: it can). Each is a case where
    verl's runtime_env or run_ppo's start depends on torch, on the GPU, or on settings run_ppo applies itself."""
    from omegaconf import OmegaConf

    def get(key: str, default: Any = None) -> Any:
        return OmegaConf.select(config, key, default=default)

    blockers = []
    blockers.extend(f"{name}=0" for name in (WARM_START_ENV, EARLY_RAY_ENV) if environ.get(name, "1") == "0")
    if not get("trainer.use_v1", True):
        blockers.append("trainer.use_v1 is false (verl's legacy TaskRunner is created as verl creates it)")
    if torch_version is None:
        blockers.append("torch's version is unknown")
    elif "rocm" in torch_version:
        blockers.append(f"torch {torch_version} is a ROCm build (verl adds ROCm settings)")
    if environ.get("TLLM_DISABLE_NVLS_MNNVL", "0") == "1":
        blockers.append("TLLM_DISABLE_NVLS_MNNVL=1 (verl's GB200 settings depend on the GPU)")
    if "megatron" in (get("actor_rollout_ref.actor.strategy"), get("critic.strategy")):
        blockers.append("a megatron engine (verl's settings for it depend on the GPU)")
    if tool := get("global_profiler.tool"):
        blockers.append(f"global_profiler.tool={tool} (verl sets up the profiler as it starts Ray)")
    if get("actor_rollout_ref.rollout.full_determinism", False) or (
        get("reward.reward_model.enable", False) and get("reward.reward_model.rollout.full_determinism", False)
    ):
        blockers.append("full_determinism (verl sets its environment as it starts Ray)")
    loggers = get("trainer.logger", [])
    if "rl_insight" in ([loggers] if isinstance(loggers, str) else list(loggers or [])):
        blockers.append("the rl_insight logger (verl sets its environment as it starts Ray)")
    return blockers


def ppo_runtime_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Pure: verl's get_ppo_ray_runtime_env for a config without `early_start_blockers`, from the driver's
    environment: a variable the environment already sets is left out (Ray workers inherit it)."""
    job = json.loads(environ.get(RAY_JOB_CONFIG_ENV, "{}"))
    env_vars = {k: v for k, v in PPO_ENV_VARS.items() if environ.get(k) is None}
    env_vars |= {k: environ.get(k, "0") for k in ALWAYS_FORWARDED}
    env_vars |= {k: environ[k] for k in FORWARDED_WHEN_SET if environ.get(k) is not None}
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if job.get("runtime_env", {}).get("working_dir") is None:
        runtime_env["working_dir"] = None
    return runtime_env


def ray_init_kwargs(base_runtime_env: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """Pure: what verl 0.9.1's run_ppo passes to ray.init, given its base runtime_env: the config's
    `ray_kwargs.ray_init`, its runtime_env merged over the base, TransferQueue's flag when it is enabled."""
    from omegaconf import OmegaConf

    base = copy.deepcopy(dict(base_runtime_env))
    init = OmegaConf.select(config, "ray_kwargs.ray_init", default=None) or {}
    if OmegaConf.select(config, "transfer_queue.enable", default=False):
        base.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
    runtime_env = OmegaConf.merge(base, init.get("runtime_env", {}))
    kwargs = OmegaConf.to_container(OmegaConf.create({**init, "runtime_env": runtime_env}))
    assert isinstance(kwargs, dict)
    return kwargs


def verl_ray_init_kwargs(config: Any) -> dict[str, Any]:
    """ray_init_kwargs on verl's own runtime_env (imports verl, and with it torch)."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    return ray_init_kwargs(get_ppo_ray_runtime_env(config), config)


def installed_torch_version() -> str | None:
    """torch's version from its package metadata: without importing it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class EarlyRay:
    """Ray, started by grpo-train with `init_kwargs`, and the TaskRunner created in it."""

    init_kwargs: dict[str, Any]
    runner: EarlyTaskRunner  # its actor created


def start(config: Any, runner: EarlyTaskRunner, environ: Mapping[str, str]) -> EarlyRay | None:
    """Starts Ray as run_ppo would and creates the runner's actor; None (and why, logged) where it cannot."""
    import ray

    blockers = early_start_blockers(config, environ, installed_torch_version())
    if not blockers and ray.is_initialized():
        blockers.append("Ray is already initialized in this process")
    if blockers:
        print(SKIPPED_LINE + "; ".join(blockers), flush=True)
        return None
    kwargs = ray_init_kwargs(ppo_runtime_env(environ), config)
    print(f"{STARTED_LINE}{kwargs} (before verl is imported)", flush=True)
    started = time.monotonic()
    ray.init(**copy.deepcopy(kwargs))  # Ray adds to the runtime_env it is given: ours stays as verl would pass it
    runner.create()
    log.info("grpo-train: ray started and task runner created in %.1f s, before verl is imported",
             time.monotonic() - started)
    return EarlyRay(init_kwargs=kwargs, runner=runner)


def confirm(early: EarlyRay | None, config: Any) -> EarlyRay | None:
    """After the driver has imported verl: the early Ray if verl would have started Ray with the same
    arguments; otherwise it is given up (give_up) and None returned, so run_ppo starts Ray itself."""
    if early is None:
        return None
    verl_kwargs = verl_ray_init_kwargs(config)
    if verl_kwargs == early.init_kwargs:
        return early
    print(f"{GIVEN_UP_LINE}verl's ray.init arguments {verl_kwargs} differ from grpo-train's {early.init_kwargs}",
          flush=True)
    give_up(early)
    return None


def give_up(early: EarlyRay | None) -> None:
    """Removes what the early start created: the TaskRunner, the TransferQueue started beside it, Ray."""
    if early is None:
        return
    import ray

    early.runner.discard()
    stop_transfer_queue(graceful=False)  # a start under way is not waited for: what it created goes with it
    ray.shutdown()
