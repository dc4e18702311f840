"""run_preflight: every check of the preflight, in the order a user would fix them.

`preflight_config_file` starts from verl.yaml (what `grpo-train --preflight` does in the preflight
Job); `run_preflight` starts from an already built config (what the rehearsal does inside the Ray
cluster). A check that crashes fails the verdict with its error rather than passing unseen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_trainer.config import (
    BuiltConfig,
    build_config,
    compose_verl_defaults,
    flatten,
    load_yaml,
    parse_cli_overrides,
    parse_settings,
    split_grpo,
)
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.preflight import data_checks, model_checks, reward_checks, storage_checks
from grpo_trainer.preflight.config_checks import verl_accepts, verl_keys
from grpo_trainer.preflight.fields import field_in_message, spec_field
from grpo_trainer.preflight.fit import ModelShape
from grpo_trainer.preflight.memory import memory_checks, sizing, with_sizing
from grpo_trainer.preflight.verdict import Check, Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreflightOptions:
    """What only the operator knows: each pool's GPU memory in bytes (by role: actor, rollout), and the size of a
    checkpoint claim it creates for the job (not mounted by the preflight: a zonal disk binds where its first pod
    runs, and that must be the actor)."""

    gpu_memory: Mapping[str, int] = field(default_factory=dict)
    # None: the claim exists (mounted); 0: a new claim the operator sizes from this verdict; else its bytes.
    new_checkpoint_claim_bytes: int | None = None
    reward_timeout_s: float = 30.0
    reward_rows: int = 4


def _guarded(name: str, check: Callable[[], list[Check]]) -> list[Check]:
    try:
        return check()
    except Exception as e:  # a defect in a check must not pass unseen, nor hide the other checks
        log.exception("preflight check %s crashed", name)
        return [Check(name, "spec", False, f"the check crashed: {type(e).__name__}: {e}", "",
                      "report this; spec.preflight.enabled=false skips the preflight")]


def preflight_config_file(
    config_path: str,
    overrides: list[str] | None = None,
    options: PreflightOptions | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    defaults: DictConfig | None = None,
) -> Verdict:
    """The whole preflight from a rendered verl.yaml: keys, build, verl's checks, then the files."""
    options = options or PreflightOptions()
    try:
        pairs = list(flatten(load_yaml(config_path))) + parse_cli_overrides(overrides or [])
        verl_pairs, grpo = split_grpo(pairs)
        settings = parse_settings(grpo)
    except GrpoConfigError as e:
        return Verdict((Check("config.file", "spec", False, str(e), config_path,
                              "the operator renders this file; report it if it does not parse"),))
    cfg = compose_verl_defaults() if defaults is None else defaults
    known = OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)
    assert isinstance(known, dict)
    keys = verl_keys(verl_pairs, known, settings.spec_verl_keys)
    if not all(c.ok for c in keys):
        return Verdict(tuple(keys))
    try:
        built = build_config(config_path, overrides, strict=False, environ=environ, defaults=cfg)
    except GrpoConfigError as e:
        message = str(e)
        reward_file = dict(verl_pairs).get("reward.custom_reward_function.path")
        # The reward file's own errors (import, signature) name the file, not a key.
        field = "spec.reward.function" if reward_file and str(reward_file) in message else field_in_message(
            message, settings.spec_verl_keys)
        return Verdict((*keys, Check("config.build", field, False, message, "", "fix the field named in the message")))
    return run_preflight(built, options, prior=keys)


def run_preflight(built: BuiltConfig, options: PreflightOptions | None = None,
                  prior: tuple[Check, ...] | list[Check] = ()) -> Verdict:
    """Every check on a built config; the files are read from the paths it names (the pod's mounts)."""
    options = options or PreflightOptions()
    cfg, settings = built.verl, built.settings
    user_keys = settings.spec_verl_keys
    checks: list[Check] = [*prior, *_guarded("verl.validate_config", lambda: [verl_accepts(cfg, user_keys)])]

    model_dir = str(cfg.actor_rollout_ref.model.path)
    model_field = spec_field("actor_rollout_ref.model.path", user_keys)
    found: dict[str, Any] = {}

    def model() -> list[Check]:
        config_check, config = model_checks.model_config(model_dir, model_field)
        if config is None:
            return [config_check]
        found["config"] = config
        tok_dir = str(OmegaConf.select(cfg, "actor_rollout_ref.model.tokenizer_path") or model_dir)
        trust = bool(OmegaConf.select(cfg, "actor_rollout_ref.model.trust_remote_code", default=False))
        tok_check, tok = model_checks.tokenizer(tok_dir, model_field, trust)
        found["tokenizer"] = tok
        prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
        return [config_check, model_checks.model_weights(model_dir, model_field), tok_check,
                model_checks.context_length(prompt, response, config)]

    checks += _guarded("model", model)
    if settings.reward.type == "model":
        checks += _guarded("reward.model", lambda: _reward_model(cfg))
    checks += _guarded("data", lambda: _data(built, found.get("tokenizer")))
    if settings.reward.type == "function":
        checks += _guarded("reward.function", lambda: _reward_function(built, options))
    sized: dict[str, int | None] = {"bytes": None}

    def checkpoints() -> list[Check]:
        found_checks, sized["bytes"] = _checkpoints(cfg, found.get("config"), options.new_checkpoint_claim_bytes)
        return found_checks

    checks += _guarded("checkpoints", checkpoints)
    sized_knobs: dict[str, Any] = {"values": (), "summary": ""}
    if "config" in found:

        def memory() -> list[Check]:
            chosen = sizing(cfg, found["config"], options.gpu_memory, settings.sized_keys)
            if chosen is None or not chosen.choices:
                # The fit is checked on what the trainer will run: the operator's fixed defaults.
                unsized = [_unsized()] if settings.sized_keys else []
                return [*memory_checks(cfg, found["config"], options.gpu_memory), *unsized]
            sized_knobs.update(values=tuple(chosen.values().items()), summary=chosen.summary())
            return memory_checks(with_sizing(cfg, chosen), found["config"], options.gpu_memory)

        checks += _guarded("memory.fit", memory)
    return Verdict(tuple(checks), sized["bytes"], sized_knobs["values"], sized_knobs["summary"])


def _unsized() -> Check:
    return Check("memory.sizing", "spec.placement.gpuMemory", True,
                 "token budgets and vLLM's memory not sized (the GPU memory or the model's shape is unknown, or not "
                 "even the smallest setting fits): the operator's fixed defaults stay")


def _reward_model(cfg: Any) -> list[Check]:
    path = str(OmegaConf.select(cfg, "reward.reward_model.model_path"))
    config_check, config = model_checks.model_config(path, "spec.reward.model.path")
    if config is None:
        return [config_check]
    tok_check, _ = model_checks.tokenizer(path, "spec.reward.model.path", trust_remote_code=False)
    return [config_check, model_checks.model_weights(path, "spec.reward.model.path"), tok_check]


def _data(built: BuiltConfig, tokenizer: Any) -> list[Check]:
    cfg, data = built.verl, built.settings.data
    if tokenizer is None:
        return [Check("data", "spec.data.trainFiles", True, "not read: the model's tokenizer did not load (see above)")]
    from grpo_trainer.data_prep import chat_token_counter

    rules = data_checks.PromptRules(
        prompt_key=str(cfg.data.prompt_key),
        max_prompt_length=int(cfg.data.max_prompt_length),
        oversize=data.oversize,
        parquet_filtered=bool(OmegaConf.select(cfg, "data.filter_overlong_prompts", default=False))
        or OmegaConf.select(cfg, "data.truncation", default="error") != "error",
    )
    count = chat_token_counter(tokenizer)
    checks, kept = [], 0
    for path in data.train_files:
        check, rows = data_checks.train_file(path, rules, count)
        checks.append(check)
        kept += rows
    if all(c.ok for c in checks):
        checks.append(data_checks.enough_prompts(kept, int(cfg.data.train_batch_size)))
    checks += [data_checks.val_file(path) for path in data.val_files]
    return checks


def _reward_function(built: BuiltConfig, options: PreflightOptions) -> list[Check]:
    cfg = built.verl
    function = cfg.reward.custom_reward_function
    rows = []
    for path in built.settings.data.train_files:
        try:
            rows = data_checks.sample_rows(path, options.reward_rows)
            break
        except Exception:  # the data checks report unreadable files; the reward is then called on none
            continue
    kwargs = OmegaConf.to_container(function.get("reward_kwargs") or OmegaConf.create({}), resolve=True)
    assert isinstance(kwargs, dict)
    calls = reward_checks.reward_calls(rows, kwargs)
    return [reward_checks.reward_function(str(function.path), str(function.name), calls, options.reward_timeout_s)]


def _checkpoints(cfg: Any, model_config: Mapping[str, Any] | None,
                 new_claim_bytes: int | None) -> tuple[list[Check], int | None]:
    """The checkpoint checks, and the size to give a new claim the operator sizes (new_claim_bytes 0)."""
    directory = str(cfg.trainer.default_local_dir)
    params = None
    if model_config is not None:
        try:
            params = ModelShape.from_hf_config(model_config).params
        except (KeyError, TypeError, ValueError):
            params = None
    keep = int(OmegaConf.select(cfg, "trainer.max_actor_ckpt_to_keep", default=1) or 1)
    if new_claim_bytes is not None:
        return storage_checks.new_claim(new_claim_bytes or None, params, keep)
    writable = storage_checks.writable(directory)
    if not writable.ok:
        return [writable], None
    return [writable, storage_checks.free_space(directory, params, keep)], None
