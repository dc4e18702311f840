"""The guardrails configuration: the GRPOJob's `spec.guardrails`, passed down as JSON (GRPO_GUARDRAILS).

Validated here, at the edge, so that a typo or an out-of-range threshold fails with the field's name.
Keys are accepted in snake_case or camelCase (`kl_runaway.min_kl` or `klRunaway.minKl`). The defaults
are the documented rules (docs/guardrails.md); every threshold is relative to the job's own history.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

log = logging.getLogger(__name__)

ENV_VAR = "GRPO_GUARDRAILS"
# Set by the operator on an attempt a rollback started; validated in full by grpo_trainer.rollback.
ROLLBACK_ENV_VAR = "GRPO_ROLLBACK"
# Fewer steps cannot give a median and MAD worth comparing with (the floor, not a tuning knob).
MIN_WARMUP_STEPS = 20


class GuardrailsConfigError(ValueError):
    """The guardrails configuration is invalid; the message names each bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel)


Mode = Literal["observe", "act"]


class _Detector(_Strict):
    enabled: bool = True
    mode: Mode | None = Field(default=None, description="observe or act for this detector; None: the job's mode.")


class NonFiniteConfig(_Detector):
    pass


class _Persisting(_Detector):
    k: int = Field(default=3, ge=1, description="Out-of-bounds steps needed ...")
    m: int = Field(default=5, ge=1, description="... among the last m evaluated steps.")

    @model_validator(mode="after")
    def _k_within_m(self) -> _Persisting:
        if self.k > self.m:
            raise ValueError(f"k ({self.k}) must not exceed m ({self.m})")
        return self

    @property
    def reach(self) -> int:
        """The most steps a trip's onset can lie before the step it trips on, counted inclusively."""
        return self.m


class KlRunawayConfig(_Persisting):
    factor: float = Field(default=10.0, gt=1, description="KL above factor x its trailing median is out of bounds.")
    min_kl: float = Field(default=0.01, ge=0, description="... and above this floor (numerical noise, see the doc).")
    window: int = Field(default=20, ge=10, le=200, description="Steps in the trailing median.")


class GradSpikeConfig(_Persisting):
    factor: float = Field(default=3.0, gt=1, description="Grad norm above factor x its trailing median ...")
    z: float = Field(default=6.0, gt=0, description="... and more than z robust sigmas (1.4826 MAD) above it.")
    window: int = Field(default=20, ge=10, le=200, description="Steps in the trailing median.")


def collapse_reach(m: int, slope_window: int) -> int:
    """Pure: how many steps policy_collapse's onset can lie before the step it trips on, counted inclusively.
    The onset goes back to where the entropy fell (grpo_trainer.guardrails.collapse), at most a slope window
    further than the k-of-m window: the reward may creep up that long after the collapse."""
    return m + slope_window


class PolicyCollapseConfig(_Persisting):
    k: int = Field(default=5, ge=1)
    m: int = Field(default=8, ge=1)
    entropy_ratio: float = Field(default=0.1, gt=0, lt=1, description="Entropy below this x its warm-up median ...")
    spread_ratio: float = Field(default=0.1, gt=0, lt=1, description="... and reward std below this x its baseline.")
    slope_window: int = Field(default=10, ge=5, le=100, description="Steps over which reward must be improving.")

    @property
    def reach(self) -> int:
        return collapse_reach(self.m, self.slope_window)


class DegenerateBatchConfig(_Persisting):
    clip_ratio: float = Field(default=0.95, gt=0, le=1, description="Share of responses cut at max length ...")
    spread_ratio: float = Field(default=0.05, gt=0, lt=1, description="... with reward std below this x baseline.")


class DetectorsConfig(_Strict):
    non_finite: NonFiniteConfig = NonFiniteConfig()
    kl_runaway: KlRunawayConfig = KlRunawayConfig()
    grad_spike: GradSpikeConfig = GradSpikeConfig()
    policy_collapse: PolicyCollapseConfig = PolicyCollapseConfig()
    degenerate_batch: DegenerateBatchConfig = DegenerateBatchConfig()


class GuardrailsConfig(_Strict):
    mode: Mode = "observe"
    warmup_steps: int = Field(default=MIN_WARMUP_STEPS, ge=MIN_WARMUP_STEPS, le=10_000)
    # A minute is the least an operator needs to see the trip and delete the RayJob; a day the most anyone
    # would keep GPUs idle for it.
    hold_seconds: int = Field(default=900, ge=60, le=86_400, description="act: how long the trainer holds.")
    detectors: DetectorsConfig = DetectorsConfig()


def detector_config(config: GuardrailsConfig, name: str) -> _Detector:
    return getattr(config.detectors, name)


def detector_mode(config: GuardrailsConfig, name: str) -> Mode:
    """The mode a detector runs in: its own, else the job's."""
    return detector_config(config, name).mode or config.mode


def _acting(config: GuardrailsConfig) -> list[str]:
    names = type(config.detectors).model_fields
    return [n for n in names if detector_config(config, n).enabled and detector_mode(config, n) == "act"]


def acts(config: GuardrailsConfig) -> bool:
    """Whether any enabled detector acts (a trip of it makes the trainer hold and the operator roll back)."""
    return bool(_acting(config))


def protection_horizon(config: GuardrailsConfig) -> int:
    """The most steps an act-mode trip's onset can lie before the step it trips on (a detector's `reach`: its
    k-of-m window m, policy_collapse's m + slope_window; non_finite trips on its onset step: 1); 0 when nothing
    acts. Checkpoints this recent must be kept."""
    return max((getattr(detector_config(config, n), "reach", 1) for n in _acting(config)), default=0)


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(["guardrails", *(str(part) for part in loc)])


def _message(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        path = _field_path(tuple(p for p in err["loc"] if p != "__root__"))
        text = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        got = "" if err["type"] == "extra_forbidden" else f" (got {err.get('input')!r})"
        lines.append(f"{path}: {text}{got}")
    return "invalid guardrails configuration: " + "; ".join(lines)


def parse_config(raw: str | Mapping[str, Any] | None) -> GuardrailsConfig:
    """JSON text or a mapping -> the configuration; None or "" -> the defaults (observe, all enabled)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return GuardrailsConfig()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise GuardrailsConfigError(f"invalid guardrails configuration: {ENV_VAR} is not JSON: {e}") from e
    if not isinstance(raw, Mapping):
        raise GuardrailsConfigError(f"invalid guardrails configuration: expected an object, got {type(raw).__name__}")
    try:
        return GuardrailsConfig.model_validate(dict(raw))
    except ValidationError as e:
        raise GuardrailsConfigError(_message(e)) from None


def config_from_env(env: Mapping[str, str] | None = None) -> GuardrailsConfig:
    return parse_config((os.environ if env is None else env).get(ENV_VAR))


def attempt_from_env(env: Mapping[str, str] | None = None) -> int:
    """This attempt's number: GRPO_ROLLBACK's `attempt` (>= 2) on an attempt a rollback started, else 1.
    Tolerant: grpo_trainer.rollback validates GRPO_ROLLBACK in full; a malformed value here only costs the
    attempt number in the status, so it is logged and read as 1 rather than stopping training."""
    raw = (os.environ if env is None else env).get(ROLLBACK_ENV_VAR)
    if raw is None or not raw.strip():
        return 1
    try:
        attempt = json.loads(raw).get("attempt")
    except (ValueError, AttributeError):
        attempt = None
    if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 2:
        return attempt
    log.warning("%s has no valid attempt (an int >= 2): %.200s; reporting attempt 1", ROLLBACK_ENV_VAR, raw)
    return 1
