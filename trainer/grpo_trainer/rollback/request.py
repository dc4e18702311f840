"""GRPO_ROLLBACK: what the operator tells an attempt that a guardrail rollback started (docs/guardrails.md).

The operator (grpo_operator.render.guardrails.Rollback) sets it on every Ray container of the new attempt:
`{"attempt": 2, "step": K, "detector": "grad_spike", "learningRate": 5e-7, "klLossCoef": null}`.
Validated here, at the edge, so a malformed value fails with the field's name before verl starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from grpo_trainer.errors import GrpoConfigError

ROLLBACK_ENV = "GRPO_ROLLBACK"


class RollbackRequest(BaseModel):
    """One rolled-back attempt: resume from checkpoint `step` (0: from the start) with these settings."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel)

    attempt: int = Field(ge=2, strict=True, description="The attempt this rollback started; the first is 1.")
    step: int = Field(ge=0, strict=True, description="The checkpoint to resume from; 0 = from the start.")
    detector: str = Field(min_length=1, description="The guardrail that tripped.")
    learning_rate: float | None = Field(default=None, gt=0, description="Absolute actor lr; null = unchanged.")
    kl_loss_coef: float | None = Field(default=None, ge=0, description="Absolute kl_loss_coef; null = unchanged.")
    requested_at: str | None = Field(
        default=None, max_length=64,
        description="When the operator decided this rollback: tells it apart from another job's (or an earlier "
        "GRPOJob of the same name's) rollback of the same attempt number on the same volume.",
    )


def _message(e: ValidationError) -> str:
    problems = []
    for err in e.errors():
        path = ".".join([ROLLBACK_ENV, *(str(p) for p in err["loc"])])
        text = "unknown field" if err["type"] == "extra_forbidden" else f"{err['msg']} (got {err.get('input')!r})"
        problems.append(f"{path}: {text}")
    return "; ".join(problems) + ". The operator writes this variable; recreate the attempt or remove it."


def parse_request(raw: str | None) -> RollbackRequest | None:
    """The env var's JSON -> the request; absent or empty -> None (this attempt is no rollback)."""
    if raw is None or not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise GrpoConfigError(f"{ROLLBACK_ENV}: not JSON ({e}): {raw[:200]!r}") from None
    if not isinstance(data, dict):
        raise GrpoConfigError(f"{ROLLBACK_ENV}: expected a JSON object, got {type(data).__name__}")
    try:
        return RollbackRequest.model_validate(data)
    except ValidationError as e:
        raise GrpoConfigError(_message(e)) from None


def request_from_env(environ: Mapping[str, str]) -> RollbackRequest | None:
    return parse_request(environ.get(ROLLBACK_ENV))
