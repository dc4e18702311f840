"""The guardrails configuration: the GRPOJob's `spec.guardrails`, passed down as JSON (GRPO_GUARDRAILS).

Validated here, at the edge, so that a typo or an out-of-range threshold fails with the field's name.
Keys are accepted in snake_case or camelCase (`kl_runaway.min_kl` or `klRunaway.minKl`). The defaults
are the documented rules (docs/guardrails.md); every threshold is relative to the job's own history.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

ENV_VAR = "GRPO_GUARDRAILS"
# Fewer steps cannot give a median and MAD worth comparing with (the floor, not a tuning knob).
MIN_WARMUP_STEPS = 20


class GuardrailsConfigError(ValueError):
    """The guardrails configuration is invalid; the message names each bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, alias_generator=to_camel)


class NonFiniteConfig(_Strict):
    enabled: bool = True


class _Persisting(_Strict):
    enabled: bool = True
    k: int = Field(default=3, ge=1, description="Out-of-bounds steps needed ...")
    m: int = Field(default=5, ge=1, description="... among the last m evaluated steps.")

    @model_validator(mode="after")
    def _k_within_m(self) -> _Persisting:
        if self.k > self.m:
            raise ValueError(f"k ({self.k}) must not exceed m ({self.m})")
        return self


class KlRunawayConfig(_Persisting):
    factor: float = Field(default=10.0, gt=1, description="KL above factor x its trailing median is out of bounds.")
    min_kl: float = Field(default=0.01, ge=0, description="... and above this floor (numerical noise, see the doc).")
    window: int = Field(default=20, ge=10, le=200, description="Steps in the trailing median.")


class GradSpikeConfig(_Persisting):
    factor: float = Field(default=3.0, gt=1, description="Grad norm above factor x its trailing median ...")
    z: float = Field(default=6.0, gt=0, description="... and more than z robust sigmas (1.4826 MAD) above it.")
    window: int = Field(default=20, ge=10, le=200, description="Steps in the trailing median.")


class PolicyCollapseConfig(_Persisting):
    k: int = Field(default=5, ge=1)
    m: int = Field(default=8, ge=1)
    entropy_ratio: float = Field(default=0.1, gt=0, lt=1, description="Entropy below this x its warm-up median ...")
    spread_ratio: float = Field(default=0.1, gt=0, lt=1, description="... and reward std below this x its baseline.")
    slope_window: int = Field(default=10, ge=5, le=100, description="Steps over which reward must be improving.")


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
    mode: Literal["observe", "act"] = "observe"
    warmup_steps: int = Field(default=MIN_WARMUP_STEPS, ge=MIN_WARMUP_STEPS, le=10_000)
    detectors: DetectorsConfig = DetectorsConfig()


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
