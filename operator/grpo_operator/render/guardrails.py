"""What the trainer is told about guardrails: the job's detectors (GRPO_GUARDRAILS) and, for an attempt a
rollback started, where it resumes and what changed (GRPO_ROLLBACK). The contract with
grpo_trainer.guardrails.config and grpo_trainer.rollback (docs/guardrails.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grpo_operator.api import GRPOJobSpec, GuardrailsSpec

GUARDRAILS_ENV = "GRPO_GUARDRAILS"
ROLLBACK_ENV = "GRPO_ROLLBACK"
LEARNING_RATE_KEY = "actor_rollout_ref.actor.optim.lr"
KL_COEF_KEY = "actor_rollout_ref.actor.kl_loss_coef"


def trainer_guardrails(spec: GuardrailsSpec) -> dict[str, Any]:
    """The trainer's part of spec.guardrails (the detectors); rollback is the operator's alone.
    Empty thresholds are left out: the trainer's defaults apply."""
    return spec.model_dump(by_alias=True, exclude_none=True, exclude={"rollback"})


def guardrails_env(spec: GRPOJobSpec) -> dict[str, str]:
    return {"name": GUARDRAILS_ENV, "value": json.dumps(trainer_guardrails(spec.guardrails), sort_keys=True)}


@dataclass(frozen=True)
class Rollback:
    """One attempt a rollback starts: resume from `step` (0: from the start, nothing was saved before the
    trouble) with the settings the rollbacks so far make."""

    attempt: int
    step: int
    detector: str
    learning_rate: float | None = None  # None: as the job has it (the change is another setting)
    kl_loss_coef: float | None = None
    # when the operator decided it: the trainer tells this rollback apart from an earlier GRPOJob's of the same
    # name and attempt number on the same (retained) volume
    requested_at: str | None = None

    def as_env(self) -> dict[str, str]:
        body = {
            "attempt": self.attempt,
            "step": self.step,
            "detector": self.detector,
            "learningRate": self.learning_rate,
            "klLossCoef": self.kl_loss_coef,
            "requestedAt": self.requested_at,
        }
        return {"name": ROLLBACK_ENV, "value": json.dumps(body, sort_keys=True)}


ATTEMPT_ANNOTATION = "grpo.dev/attempt"


def attempt_of(rayjob: dict[str, Any]) -> int:
    """The attempt a RayJob runs (1: the first, which carries no annotation)."""
    value = ((rayjob.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION, "1")
    return int(value) if str(value).isdigit() else 1


def with_rollback(rayjob: dict[str, Any], rollback: Rollback) -> dict[str, Any]:
    """The RayJob with GRPO_ROLLBACK in every Ray container (the driver (head) acts on it, and the workers set
    the learning rate after they load the checkpoint) and its attempt as an annotation. A copy."""
    copied = json.loads(json.dumps(rayjob))
    copied["metadata"].setdefault("annotations", {})[ATTEMPT_ANNOTATION] = str(rollback.attempt)
    cluster = copied["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster.get("workerGroupSpecs", []))]
    for template in templates:
        for container in template["spec"]["containers"]:
            env = [e for e in container.get("env", []) if e.get("name") != ROLLBACK_ENV]
            container["env"] = [*env, rollback.as_env()]
    return copied


@dataclass(frozen=True)
class Settings:
    """The settings a rollback may change, as the job's verl config has them."""

    learning_rate: float
    kl_loss_coef: float | None  # None: the job has no KL loss


def changed_settings(spec: GuardrailsSpec, base: Settings, rollbacks: int) -> tuple[Settings, str]:
    """The settings after `rollbacks` rollbacks (each applies the one configured change once) and a phrase
    saying what the last one changed."""
    rb = spec.rollback
    if rb.change == "klCoef" and base.kl_loss_coef is not None:
        before = base.kl_loss_coef * rb.kl_coef_factor ** (rollbacks - 1)
        after = base.kl_loss_coef * rb.kl_coef_factor**rollbacks
        return Settings(base.learning_rate, after), f"klLossCoef {before:.6g} -> {after:.6g}"
    before = base.learning_rate * rb.learning_rate_factor ** (rollbacks - 1)
    after = base.learning_rate * rb.learning_rate_factor**rollbacks
    return Settings(after, base.kl_loss_coef), f"learningRate {before:.6g} -> {after:.6g}"
