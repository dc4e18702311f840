"""verl.yaml -> the full verl 0.9.1 config, with our features applied (docs/config-contract.md).

Layers, later wins:
  1. verl's own composed `ppo_trainer` defaults (hydra compose on verl's config dir, as main_ppo does)
  2. our defaults (validation off, `grpo` tracking backend)
  3. the user's verl keys (flat dotted or nested; unknown keys are an error; `+key` adds, as in hydra)
  4. values derived from the `grpo:` mapping (max_model_len, reward manager keys, data files, runtime env)
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from pydantic import ValidationError

from grpo_trainer.data_prep import DataPlan, plan_data
from grpo_trainer.errors import DataPrepError, GrpoConfigError
from grpo_trainer.guardrails.config import ENV_VAR as GUARDRAILS_ENV
from grpo_trainer.guardrails.config import GuardrailsConfigError
from grpo_trainer.guardrails.config import parse_config as parse_guardrails
from grpo_trainer.resume import apply_resume
from grpo_trainer.reward.length_keys import LENGTH_REWARD_MANAGER_KEYS
from grpo_trainer.reward.model import FREE_CACHE_ENGINE_KEY as REWARD_MODEL_FREE_CACHE_ENGINE_KEY
from grpo_trainer.rollback.request import ROLLBACK_ENV, parse_request
from grpo_trainer.rollback.start import apply_rollback
from grpo_trainer.settings import GrpoSettings
from grpo_trainer.startup.vllm_executor import ExecutorChoice, executor_choices
from grpo_trainer.worker_setup import ROLE_RESOURCES_ENV, SETUP_HOOK

log = logging.getLogger(__name__)

GRPO_KEY = "grpo"
MAX_MODEL_LEN_KEY = "actor_rollout_ref.rollout.max_model_len"

# Our defaults, applied before the user's keys so an explicit user value still wins.
OUR_DEFAULTS: dict[str, Any] = {
    "trainer.val_before_train": False,
    "trainer.test_freq": -1,
    "trainer.logger": ["console"],  # verl's default adds wandb, which needs an account and network
}

# Top-level sections that verl 0.9.1 still composes (legacy_reward_impl.yaml) but main_ppo never reads.
LEGACY_SECTIONS: dict[str, str] = {
    "reward_model": "reward.reward_model.* / reward.reward_manager.*",
    "custom_reward_function": "reward.custom_reward_function.*",
    "sandbox_fusion": "reward.sandbox_fusion.*",
}

# The values a reader of --dry-run cares about first.
SUMMARY_KEYS: tuple[str, ...] = (
    "algorithm.adv_estimator",
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type",
    "actor_rollout_ref.rollout.name",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.enable_chunked_prefill",
    "actor_rollout_ref.rollout.max_num_batched_tokens",
    MAX_MODEL_LEN_KEY,
    "actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend",
    "data.max_prompt_length",
    "data.max_response_length",
    "data.train_files",
    "data.val_files",
    "trainer.val_before_train",
    "trainer.test_freq",
    "trainer.logger",
    "trainer.v1.trainer_mode",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "reward.reward_manager.source",
    "reward.reward_manager.name",
    "reward.reward_manager.module.path",
    "reward.custom_reward_function.path",
    "reward.custom_reward_function.name",
)


@dataclass(frozen=True)
class MaxModelLen:
    requested: int
    model_limit: int | None
    value: int

    @property
    def clamped(self) -> bool:
        return self.value < self.requested


@dataclass
class BuiltConfig:
    verl: DictConfig
    settings: GrpoSettings
    max_model_len: MaxModelLen
    data_plan: DataPlan | None
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        values = {k: _plain(OmegaConf.select(self.verl, k, default=None)) for k in SUMMARY_KEYS}
        return {
            "verl": values,
            "max_model_len": {
                "requested": self.max_model_len.requested,
                "model_max_position_embeddings": self.max_model_len.model_limit,
                "value": self.max_model_len.value,
                "clamped": self.max_model_len.clamped,
            },
            "grpo": self.settings.model_dump(by_alias=True),
            "ray_runtime_env": _plain(OmegaConf.select(self.verl, "ray_kwargs.ray_init.runtime_env")),
            "warnings": list(self.warnings),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, DictConfig) or OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


# ---------------------------------------------------------------------------------------------- verl


def verl_config_dir() -> str:
    """verl's config directory, found without importing verl (its __init__ imports torch): the driver builds
    the config before it imports verl (grpo_trainer.startup.ray_start)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise GrpoConfigError("verl is not installed: grpo-train runs on verl 0.9.1 (the trainer image has it)")
    return str(Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config")


def compose_verl_defaults(config_name: str = "ppo_trainer") -> DictConfig:
    """verl's defaults exactly as `python -m verl.trainer.main_ppo` composes them (hydra, verl's dir)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return compose(config_name=config_name)


# ------------------------------------------------------------------------------------------ overrides


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Pure: nested and dotted keys alike -> (dotted key, leaf value); empty mappings are leaves."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise GrpoConfigError(f"config keys must be strings, got {key!r}")
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping) and value:
            yield from flatten(value, dotted)
        else:
            yield dotted, value


def _known_paths(tree: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        yield dotted
        if isinstance(value, Mapping):
            yield from _known_paths(value, dotted)


def check_known_key(defaults: Mapping[str, Any], key: str) -> None:
    """Pure: raise GrpoConfigError naming `key` if verl's composed defaults have no such key."""
    node: Any = defaults
    for i, part in enumerate(key.split(".")):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
            continue
        if isinstance(node, Mapping) and not node and i > 0:
            parent = ".".join(key.split(".")[:i])
            raise GrpoConfigError(
                f"unknown verl key {key!r}: {parent} is an empty mapping in verl 0.9.1's defaults; "
                f"add new keys to it with a leading '+' (+{key}), as on verl's command line"
            )
        close = difflib.get_close_matches(key, list(_known_paths(defaults)), n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GrpoConfigError(f"unknown verl key {key!r} (not in verl 0.9.1's ppo_trainer config){hint}")


def check_not_legacy(key: str, value: Any) -> None:
    section = key.lstrip("+").split(".", 1)[0]
    if section in LEGACY_SECTIONS and value is not None:
        raise GrpoConfigError(
            f"verl key {key!r} is a legacy key that verl 0.9.1's main_ppo silently ignores; "
            f"use {LEGACY_SECTIONS[section]} instead"
        )


def apply_overrides(cfg: DictConfig, pairs: list[tuple[str, Any]], known: Mapping[str, Any]) -> None:
    for raw_key, value in pairs:
        add = raw_key.startswith("+")
        key = raw_key[1:] if add else raw_key
        check_not_legacy(key, value)
        if not add:
            check_known_key(known, key)
        try:
            if add:
                with open_dict(cfg):
                    OmegaConf.update(cfg, key, value, merge=True, force_add=True)
            else:
                OmegaConf.update(cfg, key, value, merge=True)
        except Exception as e:  # omegaconf's own message names the node; keep it, add the key
            raise GrpoConfigError(f"cannot set verl key {key!r} to {value!r}: {e}") from e


def parse_cli_overrides(items: list[str]) -> list[tuple[str, Any]]:
    """`key=value` -> (key, YAML-typed value), as hydra types them (8 -> int, true -> bool)."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise GrpoConfigError(f"override {item!r} is not key=value")
        pairs.append((key.strip(), yaml.safe_load(raw) if raw else None))
    return pairs


def split_grpo(pairs: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """Separate `grpo.*` leaves (ours) from verl's; returns (verl pairs, nested grpo mapping)."""
    verl_pairs: list[tuple[str, Any]] = []
    grpo: dict[str, Any] = {}
    for key, value in pairs:
        if key == GRPO_KEY or key.startswith(GRPO_KEY + "."):
            parts = key.split(".")[1:]
            if not parts:
                continue  # an empty `grpo: {}`
            node = grpo
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        else:
            verl_pairs.append((key, value))
    return verl_pairs, grpo


def load_yaml(path: str) -> dict[str, Any]:
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except FileNotFoundError as e:
        raise GrpoConfigError(f"config file {path} does not exist") from e
    except Exception as e:
        raise GrpoConfigError(f"config file {path} is not valid YAML: {e}") from e
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise GrpoConfigError(f"config file {path} must be a mapping at the top level")
    return loaded


# ------------------------------------------------------------------------------------------ features


def read_max_position_embeddings(model_path: str) -> int | None:
    """The model's context limit from its config.json (text_config for multimodal models)."""
    cfg_file = Path(model_path) / "config.json"
    data = json.loads(cfg_file.read_text())
    for candidate in (data, data.get("text_config") or {}):
        value = candidate.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None


def resolve_max_model_len(
    prompt_len: int, response_len: int, factor: float, model_limit: int | None, explicit: int | None
) -> MaxModelLen:
    """Pure: (prompt+response)*factor, or the user's explicit value, clamped to the model's limit."""
    requested = explicit if explicit is not None else int((prompt_len + response_len) * factor)
    value = min(requested, model_limit) if model_limit else requested
    return MaxModelLen(requested=requested, model_limit=model_limit, value=value)


def _set(cfg: DictConfig, key: str, value: Any) -> None:
    OmegaConf.update(cfg, key, value, merge=False)


def apply_max_model_len(
    cfg: DictConfig, settings: GrpoSettings, explicit: int | None, strict: bool, warnings: list[str]
) -> MaxModelLen:
    prompt_len = int(cfg.data.max_prompt_length)
    response_len = int(cfg.data.max_response_length)
    model_path = str(cfg.actor_rollout_ref.model.path)
    try:
        limit = read_max_position_embeddings(model_path)
    except (OSError, ValueError) as e:
        if strict:
            raise GrpoConfigError(
                f"cannot read {model_path}/config.json for max_position_embeddings (actor_rollout_ref.model.path): {e}"
            ) from e
        limit = None
        warnings.append(f"max_model_len not clamped: cannot read {model_path}/config.json ({e})")
    result = resolve_max_model_len(prompt_len, response_len, settings.max_model_len_factor, limit, explicit)
    if result.clamped:
        warnings.append(
            f"{MAX_MODEL_LEN_KEY}={result.requested} is above the model's max_position_embeddings="
            f"{result.model_limit}; clamped to {result.value} (verl 0.9.1 raises above the model's limit)"
        )
    if result.value < prompt_len + response_len:
        warnings.append(
            f"{MAX_MODEL_LEN_KEY}={result.value} is below max_prompt_length+max_response_length="
            f"{prompt_len + response_len}: long prompts will get shorter responses"
        )
    _set(cfg, MAX_MODEL_LEN_KEY, result.value)
    return result


def apply_reward(cfg: DictConfig, settings: GrpoSettings, validate_files: bool) -> None:
    fn_path = OmegaConf.select(cfg, "reward.custom_reward_function.path")
    kind = settings.reward.type
    if kind == "length":
        if fn_path:
            raise GrpoConfigError(
                "grpo.reward.type=length but reward.custom_reward_function.path is set: "
                "the length reward ignores it (use grpo.reward.type=function)"
            )
        for key, value in LENGTH_REWARD_MANAGER_KEYS.items():
            _set(cfg, key, value)
    elif kind == "function":
        if not fn_path:
            raise GrpoConfigError("grpo.reward.type=function needs reward.custom_reward_function.path")
        if validate_files:
            from grpo_trainer.reward.user_function import validate_reward_function

            validate_reward_function(str(fn_path), str(cfg.reward.custom_reward_function.name))
    elif kind == "model" and not OmegaConf.select(cfg, "reward.reward_model.enable"):
        raise GrpoConfigError("grpo.reward.type=model needs reward.reward_model.enable=true")
    if OmegaConf.select(cfg, "reward.reward_model.enable") and OmegaConf.select(
        cfg, "reward.reward_model.enable_resource_pool"
    ):
        # verl 0.9.1 never wakes a reward model of its own pool once asleep: step 1 would wait forever
        # (grpo_trainer/reward/model.py)
        _set(cfg, REWARD_MODEL_FREE_CACHE_ENGINE_KEY, False)


def apply_data(cfg: DictConfig, settings: GrpoSettings) -> DataPlan | None:
    d = settings.data
    if not d.train_files:
        if d.val_files:
            raise GrpoConfigError("grpo.data.valFiles is set but grpo.data.trainFiles is empty")
        return None
    try:
        plan = plan_data(d.train_files, d.val_files, d.prepared_dir)
    except DataPrepError as e:
        raise GrpoConfigError(str(e)) from e
    _set(cfg, "data.train_files", plan.train_files)
    _set(cfg, "data.val_files", plan.val_files)
    return plan


def check_placement(cfg: DictConfig, settings: GrpoSettings) -> None:
    """The operator's placement mode and verl's trainer mode must describe the same pools."""
    mode = OmegaConf.select(cfg, "trainer.v1.trainer_mode")
    if settings.placement.mode == "disaggregated" and mode != "separate_async":
        raise GrpoConfigError(
            "grpo.placement.mode=disaggregated needs trainer.v1.trainer_mode=separate_async: verl 0.9.1 "
            f"gives rollout a pool of its own only in that mode (got {mode!r})"
        )
    if settings.placement.mode == "colocated" and mode == "separate_async":
        raise GrpoConfigError(
            "trainer.v1.trainer_mode=separate_async starts a standalone rollout pool, "
            "which grpo.placement.mode=colocated has no worker group for"
        )


def apply_vllm_executor(cfg: DictConfig, environ: Mapping[str, str]) -> list[ExecutorChoice]:
    """vLLM's "uni" executor for the rollout servers of one GPU (grpo_trainer.startup.vllm_executor); logged
    either way."""
    plain = {
        section: OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        for section in ("actor_rollout_ref", "reward")
        if (node := OmegaConf.select(cfg, section)) is not None
    }
    choices = executor_choices(plain, environ)
    for choice in choices:
        if choice.backend is not None:
            with open_dict(cfg):
                OmegaConf.update(cfg, choice.key, choice.backend, merge=True, force_add=True)
        log.info("vLLM executor for %s: %s (%s)", choice.section, choice.backend or "verl's", choice.reason)
    return choices


def worker_env(settings: GrpoSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """Pure: environment every Ray worker of the job gets (read by grpo_trainer.worker_setup)."""
    job = settings.job
    env = {
        ROLE_RESOURCES_ENV: json.dumps(dict(settings.placement.role_resources), sort_keys=True),
        "GRPO_METRICS_ENABLED": "1" if settings.metrics.enabled else "0",
        "GRPO_METRICS_PORT": environ.get("GRPO_METRICS_PORT", str(settings.metrics.port)),
        "GRPO_METRICS_ADDRESS": settings.metrics.address,
    }
    if settings.metrics.steps_file:
        env["GRPO_METRICS_STEPS_FILE"] = settings.metrics.steps_file
    if guardrails := environ.get(GUARDRAILS_ENV):
        # refused here, at start-up, with the field's name, rather than by the TaskRunner after the rollout
        try:
            parse_guardrails(guardrails)
        except GuardrailsConfigError as e:
            raise GrpoConfigError(str(e)) from None
        env[GUARDRAILS_ENV] = guardrails
    if rollback := environ.get(ROLLBACK_ENV):
        # the actor workers set the learning rate after their checkpoint load (grpo_trainer.rollback)
        parse_request(rollback)
        env[ROLLBACK_ENV] = rollback
    name = job.name if job else environ.get("GRPO_JOB_NAME")
    namespace = job.namespace if job else environ.get("GRPO_JOB_NAMESPACE")
    if name and namespace:
        env["GRPO_JOB_NAME"], env["GRPO_JOB_NAMESPACE"] = name, namespace
    return env


def apply_runtime_env(cfg: DictConfig, settings: GrpoSettings, environ: Mapping[str, str]) -> None:
    with open_dict(cfg):
        runtime_env = cfg.ray_kwargs.ray_init.runtime_env
        existing = OmegaConf.select(runtime_env, "worker_process_setup_hook")
        if existing and existing != SETUP_HOOK:
            raise GrpoConfigError(
                f"ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={existing!r} would replace ours "
                f"({SETUP_HOOK}), which pins roles to their pods"
            )
        runtime_env.worker_process_setup_hook = SETUP_HOOK
        env_vars = OmegaConf.to_container(runtime_env.get("env_vars") or OmegaConf.create({}))
        runtime_env.env_vars = {**env_vars, **worker_env(settings, environ)}


def apply_tracking(cfg: DictConfig, settings: GrpoSettings) -> None:
    from grpo_trainer.progress.tracking import BACKEND_NAME

    loggers = cfg.trainer.logger
    names = [loggers] if isinstance(loggers, str) else list(loggers or [])
    if BACKEND_NAME not in names:
        names.append(BACKEND_NAME)  # status reporting rides on it even when metrics are off
    _set(cfg, "trainer.logger", names)


# ------------------------------------------------------------------------------------------- builder


def parse_settings(grpo: Mapping[str, Any]) -> GrpoSettings:
    try:
        return GrpoSettings.model_validate(dict(grpo))
    except ValidationError as e:
        problems = "; ".join(f"grpo.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise GrpoConfigError(f"invalid grpo settings: {problems}") from e


def build_config(
    config_path: str,
    cli_overrides: list[str] | None = None,
    *,
    strict: bool = True,
    environ: Mapping[str, str] | None = None,
    defaults: DictConfig | None = None,
) -> BuiltConfig:
    """The whole verl config for one run. strict=False (dry-run) tolerates an unreadable model dir."""
    env = os.environ if environ is None else environ
    raw = load_yaml(config_path)
    pairs = list(flatten(raw)) + parse_cli_overrides(cli_overrides or [])
    verl_pairs, grpo = split_grpo(pairs)
    settings = parse_settings(grpo)

    cfg = compose_verl_defaults() if defaults is None else defaults.copy()
    known = OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)
    assert isinstance(known, dict)
    apply_overrides(cfg, list(OUR_DEFAULTS.items()), known)
    apply_overrides(cfg, verl_pairs, known)

    explicit = next((v for k, v in reversed(verl_pairs) if k.lstrip("+") == MAX_MODEL_LEN_KEY), None)
    warnings: list[str] = []
    mml = apply_max_model_len(cfg, settings, int(explicit) if explicit is not None else None, strict, warnings)
    apply_reward(cfg, settings, validate_files=True)
    plan = apply_data(cfg, settings)
    # the rollback first: the tracker it writes is the job's own checkpoint, which apply_resume prefers
    apply_rollback(cfg, env, strict, warnings)
    apply_resume(cfg, settings.checkpoints.resume_from, strict, warnings)
    check_placement(cfg, settings)
    apply_vllm_executor(cfg, env)
    apply_runtime_env(cfg, settings, env)
    apply_tracking(cfg, settings)
    for w in warnings:
        log.warning("%s", w)
    return BuiltConfig(verl=cfg, settings=settings, max_model_len=mml, data_plan=plan, warnings=warnings)
