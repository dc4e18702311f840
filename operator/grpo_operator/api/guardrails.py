"""Per-step health checks of a run (docs/guardrails.md): each detector's thresholds, and what the
operator does when one trips."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from grpo_operator.api.base import ApiModel, cel, validations

GuardrailMode = Literal["observe", "act"]
_DETECTOR_MODE = (
    "observe or act for this detector alone; empty follows guardrails.mode (e.g. act on nonFinite only)."
)


class _DetectorSpec(ApiModel):
    enabled: bool = Field(default=True, description="Run this detector.")
    mode: GuardrailMode | None = Field(default=None, description=_DETECTOR_MODE)


# The trainer's k-of-m defaults (grpo_trainer/guardrails/config.py; a unit test keeps them equal): an empty k or
# m takes them, so k <= m is judged with them (k: 6 alone would exceed the default m of 5).
PERSISTENCE_DEFAULTS = {"policyCollapse": (5, 8), "other": (3, 5)}


def _k_within_m(k_default: int, m_default: int) -> dict[str, Any]:
    k, m = f"(has(self.k) ? self.k : {k_default})", f"(has(self.m) ? self.m : {m_default})"
    return validations(cel(f"{k} <= {m}", f"guardrails: k must not exceed m (k of the last m steps out of bounds "
                                          f"trips the detector; defaults k={k_default}, m={m_default}); lower k or "
                                          "raise m"))


class _PersistingDetectorSpec(_DetectorSpec):
    """k of the last m evaluated steps out of bounds trips it; empty fields take the trainer's defaults
    (docs/guardrails.md)."""

    model_config = ConfigDict(json_schema_extra=_k_within_m(*PERSISTENCE_DEFAULTS["other"]))

    k: int | None = Field(default=None, ge=1, le=200, description="Out-of-bounds steps needed to trip ...")
    m: int | None = Field(default=None, ge=1, le=200, description="... among the last m evaluated steps.")


class KlRunawaySpec(_PersistingDetectorSpec):
    """KL loss far above its own trailing median (default: 10x, above 0.01, 3 of 5 steps)."""

    factor: float | None = Field(default=None, gt=1, le=1000, description="KL above factor x its trailing median.")
    min_kl: float | None = Field(default=None, ge=0, le=100, description="... and above this floor.")
    window: int | None = Field(default=None, ge=10, le=200, description="Steps in the trailing median.")


class GradSpikeSpec(_PersistingDetectorSpec):
    """Gradient norm far above its own trailing median (default: 3x and 6 robust sigmas, 3 of 5 steps)."""

    factor: float | None = Field(default=None, gt=1, le=1000, description="Grad norm above factor x its trailing "
                                 "median ...")
    z: float | None = Field(default=None, gt=0, le=1000, description="... and more than z robust sigmas above it.")
    window: int | None = Field(default=None, ge=10, le=200, description="Steps in the trailing median.")


class PolicyCollapseSpec(_PersistingDetectorSpec):
    """Entropy and reward spread far below the warm-up's while reward stops improving (default 5 of 8 steps)."""

    model_config = ConfigDict(json_schema_extra=_k_within_m(*PERSISTENCE_DEFAULTS["policyCollapse"]))

    entropy_ratio: float | None = Field(default=None, gt=0, lt=1, description="Entropy below this x its warm-up "
                                        "median ...")
    spread_ratio: float | None = Field(default=None, gt=0, lt=1, description="... and reward std below this x its "
                                       "warm-up median.")
    slope_window: int | None = Field(default=None, ge=5, le=100, description="Steps over which reward must be "
                                     "improving.")


class DegenerateBatchSpec(_PersistingDetectorSpec):
    """Nearly every response cut at the length limit with no reward spread (default 95 %, 3 of 5 steps)."""

    clip_ratio: float | None = Field(default=None, gt=0, le=1, description="Share of responses cut at "
                                     "data.maxResponseLength ...")
    spread_ratio: float | None = Field(default=None, gt=0, lt=1, description="... with reward std below this x its "
                                       "warm-up median.")


class GuardrailDetectors(ApiModel):
    """Each detector's switch, mode and thresholds; every rule is relative to the job's own history."""

    non_finite: _DetectorSpec = Field(default_factory=_DetectorSpec, description="NaN or infinite loss, gradient "
                                      "norm, entropy or KL (no warm-up).")
    kl_runaway: KlRunawaySpec = Field(default_factory=KlRunawaySpec, description="KL runaway.")
    grad_spike: GradSpikeSpec = Field(default_factory=GradSpikeSpec, description="Gradient-norm spikes.")
    policy_collapse: PolicyCollapseSpec = Field(default_factory=PolicyCollapseSpec, description="Policy collapse.")
    degenerate_batch: DegenerateBatchSpec = Field(default_factory=DegenerateBatchSpec,
                                                  description="Degenerate batches.")


class GuardrailRollback(ApiModel):
    """What act does when a detector trips: a new attempt from the last checkpoint before the trouble, with one
    bounded change; once maxRollbacks are used, the next trip suspends the job."""

    max_rollbacks: int = Field(default=2, ge=0, le=2, description="Rollbacks per job (at most 2); the trip after "
                               "the last suspends the job (spec.scheduling.suspend) with its checkpoints kept.")
    change: Literal["learningRate", "klCoef"] = Field(
        default="learningRate",
        description="The one setting each rollback changes: learningRate multiplies the actor's learning rate by "
        "learningRateFactor; klCoef multiplies the KL loss coefficient by klCoefFactor (needs "
        "algorithm.klLoss.enabled).",
    )
    learning_rate_factor: float = Field(default=0.5, ge=0.1, le=0.9, description="Learning rate x this per rollback.")
    kl_coef_factor: float = Field(default=2.0, ge=1.1, le=10, description="KL loss coefficient x this per rollback.")


class GuardrailsSpec(ApiModel):
    """Health checks of the run, per training step (docs/guardrails.md). observe records a GuardrailTripped
    condition and an Event; act also rolls the job back, and suspends it when the problem comes back."""

    mode: GuardrailMode = Field(default="observe", description="observe (report only) or act (roll back, then "
                                "suspend).")
    warmup_steps: int = Field(default=20, ge=20, le=10_000, description="Steps each statistical detector watches "
                              "before it may trip (at least 20).")
    hold_seconds: int = Field(default=900, ge=60, le=86_400, description="In act mode, how long the trainer waits "
                              "(taking no step and saving no checkpoint) for the operator to roll back after a trip; "
                              "after that the attempt fails.")
    rollback: GuardrailRollback = Field(default_factory=GuardrailRollback, description="What act does.")
    detectors: GuardrailDetectors = Field(default_factory=GuardrailDetectors, description="Per-detector settings.")
