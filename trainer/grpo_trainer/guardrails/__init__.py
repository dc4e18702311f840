"""Training guardrails (issue 18): detectors over the step history, each relative to the job's own
baseline, published as metrics and in status.progress.guardrails. See docs/guardrails.md."""

from grpo_trainer.guardrails.config import GuardrailsConfig, GuardrailsConfigError, config_from_env, parse_config
from grpo_trainer.guardrails.guardrails import Guardrails
from grpo_trainer.guardrails.sample import DetectorState, Status, StepSample

__all__ = [
    "DetectorState",
    "Guardrails",
    "GuardrailsConfig",
    "GuardrailsConfigError",
    "Status",
    "StepSample",
    "config_from_env",
    "parse_config",
]
