"""The GRPOJob's status: what the operator and the trainer observed. Status models are
StatusModel, not ApiModel: handlers build them, and an older operator must read a newer one's."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from grpo_operator.api.base import StatusModel

Phase = Literal["Preflight", "Pending", "Running", "Suspended", "Exporting", "Succeeded", "Failed", "Invalid"]


class Condition(StatusModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    type: str = Field(
        description="Condition type: Ready, Valid, ClaimsBound, Restarted, Exported, and at the end Complete and "
        "Succeeded, or Failed (for kubectl wait --for=condition=...)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word, for machines.")
    message: str = Field(default="", description="What happened and what to do, for humans.")
    last_transition_time: datetime | None = Field(default=None, description="When status last changed.")
    observed_generation: int | None = Field(
        default=None, description="metadata.generation this condition was computed from."
    )


class CheckpointStatus(StatusModel):
    """The latest checkpoint on the volume."""

    step: int = Field(description="Training step of the checkpoint.")
    path: str = Field(
        description="Directory of the checkpoint inside the trainer pods, e.g. /checkpoints/global_step_100."
    )


class ProgressStatus(StatusModel):
    """Training progress, patched by the trainer every step."""

    step: int = Field(default=0, description="Last finished training step.")
    total_steps: int | None = Field(default=None, description="Steps in the whole run.")
    reward_mean: float | None = Field(default=None, description="Mean reward of the last step's responses.")
    kl_divergence: float | None = Field(default=None, description="KL to the reference policy at the last step.")
    entropy: float | None = Field(default=None, description="Policy entropy at the last step.")
    response_length_mean: float | None = Field(default=None, description="Mean response length in tokens.")
    entropy_baseline: float | None = Field(
        default=None,
        description="Median entropy of the job's first 10 steps: what the entropy-collapse alert compares with.",
    )
    non_finite_steps: int | None = Field(
        default=None, description="Steps whose loss, gradient norm, entropy or reward was NaN or infinite."
    )
    updated_at: datetime | None = Field(default=None, description="When the trainer last reported.")
    guardrails: dict[str, Any] | None = Field(
        default=None,
        description="Each guardrail detector's state as the trainer computed it at the last step (mode, status, "
        "step, value, baseline, onset step, reason; in act mode the action the trainer holds for; docs/guardrails.md). "
        "The operator records and acts on it (status.guardrails).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class RehearsalCheck(StatusModel):
    """One check of a rehearsal."""

    name: str = Field(description="What was checked, e.g. ray.placement.global_pool.")
    field: str = Field(default="", description="The spec field to change when it failed.")
    ok: bool = Field(description="Whether it passed.")
    message: str = Field(default="", description="What was found.")
    fix: str | None = Field(default=None, description="What to do when it failed.")


class RehearsalStatus(StatusModel):
    """The verdict of spec.rehearsal, written by the trainer in the Ray cluster."""

    passed: bool = Field(description="Whether every check passed.")
    checks: list[RehearsalCheck] = Field(default_factory=list, description="Each check and what it found.")
    finished_at: datetime | None = Field(default=None, description="When the rehearsal finished.")


class LogsStatus(StatusModel):
    """Where the driver's output is: KubeRay's submitter Job follows it with `ray job logs --follow`."""

    submitter_job: str = Field(description="The submitter Job (named after the RayJob); kept after the job ends.")
    command: str = Field(description="A kubectl command that prints the driver's log.")


class ExportStatus(StatusModel):
    """The exported HuggingFace model."""

    path: str = Field(description="Claim-relative directory the model was written to.")
    step: int | None = Field(default=None, description="Training step of the checkpoint that was converted.")
    size_bytes: int | None = Field(default=None, description="Total size of the exported files.")


class PreflightCheckStatus(StatusModel):
    """A failed check of the preflight's verdict."""

    name: str = Field(description="The check, e.g. model.context_length.")
    field: str = Field(default="", description="The spec field to change, e.g. spec.data.maxResponseLength.")
    value: str = Field(default="", description="What the preflight found.")
    message: str = Field(default="", description="What is wrong.")
    fix: str = Field(default="", description="How to fix it.")


class PreflightStatus(StatusModel):
    """The preflight Job of the spec as it is now, and its verdict."""

    job_name: str = Field(description="The preflight Job.")
    digest: str = Field(description="Digest of what the Job checks; a Job with another digest checked an older spec.")
    passed: bool | None = Field(default=None, description="The verdict; empty while the Job runs.")
    failures: list[PreflightCheckStatus] = Field(default_factory=list, description="The checks that failed.")
    checkpoint_claim_size: str | None = Field(
        default=None, description="The size the preflight chose for the checkpoint PVC the operator creates "
        "(spec.checkpoints.volume.size empty)."
    )


class GuardrailTripStatus(StatusModel):
    """A detector that tripped, as the operator recorded it."""

    attempt: int = Field(description="The attempt it tripped in (1 is the first; each rollback starts one more).")
    detector: str = Field(description="The detector, e.g. grad_spike.")
    step: int | None = Field(default=None, description="The step it tripped at.")
    onset_step: int | None = Field(
        default=None,
        description="The first out-of-bounds step of the window that tripped (policy_collapse: where the entropy "
        "fell under its bound, at most m + slopeWindow steps before the trip).",
    )
    value: float | None = Field(default=None, description="Its headline value at the trip.")
    baseline: float | None = Field(default=None, description="The baseline that value was compared with.")
    mode: str = Field(default="observe", description="observe or act, as this detector ran.")
    outcome: str = Field(
        default="Observed", description="Observed, RolledBack or Suspended: what the operator did about it."
    )
    reason: str = Field(default="", description="The detector's rule as it broke.")
    checkpoint_step: int | None = Field(
        default=None, description="act: the newest checkpoint saved before the onset (the trainer pinned it)."
    )


class GuardrailRollbackStatus(StatusModel):
    """A rollback: the attempt it started, where it resumed, and the one setting it changed."""

    attempt: int = Field(description="The attempt this rollback started.")
    detector: str = Field(description="The detector whose trip caused it.")
    from_step: int = Field(description="The checkpoint step the attempt resumes from (pinned: keep never prunes it).")
    change: str = Field(description="The setting changed, e.g. learningRate 1e-06 -> 5e-07.")
    learning_rate: float | None = Field(default=None, description="The actor learning rate of the attempt.")
    kl_loss_coef: float | None = Field(default=None, description="The KL loss coefficient of the attempt.")
    requested_at: datetime | None = Field(default=None, description="When the operator decided it.")
    started: bool = Field(default=False, description="Whether the attempt's RayJob has been created.")
    resumed: bool = Field(
        default=False, description="A user's resume after a suspension (no setting changed), not a rollback."
    )


class GuardrailsStatus(StatusModel):
    """What the operator did about the guardrails' trips."""

    attempt: int = Field(default=1, description="The current attempt (1 plus the rollbacks started).")
    trips: list[GuardrailTripStatus] = Field(default_factory=list, description="Every trip, in order.")
    rollbacks: list[GuardrailRollbackStatus] = Field(default_factory=list, description="Every rollback, in order.")
    suspended: bool = Field(
        default=False,
        description="The guardrails suspended the job (spec.scheduling.suspend was set to true); set it back to "
        "false to resume from the last rollback's checkpoint with the changes made so far.",
    )


class AppliedRuntimeStatus(StatusModel):
    """The runtime a job took at its creation, as it was then: the job keeps it when the runtime is edited."""

    name: str = Field(description="The GRPORuntime.")
    uid: str | None = Field(default=None, description="Its metadata.uid (a runtime re-created under the name differs).")
    generation: int | None = Field(default=None, description="Its metadata.generation when the job took it.")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description="Its spec as the job took it; the job's children are rendered from this, not from the "
        "runtime as it is now.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    from_runtime: list[str] = Field(
        default_factory=list,
        description="Spec fields whose effective value came from the runtime alone.",
    )
    merged: list[str] = Field(
        default_factory=list,
        description="Spec fields whose effective value merges the runtime's and the job's (lists and maps).",
    )
    overridden: list[str] = Field(
        default_factory=list, description="Spec fields the runtime sets that the job's own value replaced."
    )


class GRPOJobStatus(StatusModel):
    """What the operator and the trainer observed."""

    phase: Phase | None = Field(
        default=None,
        description="Preflight, Pending, Running, Suspended, Exporting, Succeeded, Failed or Invalid.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions with reasons and messages.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    ray_job_name: str | None = Field(default=None, description="The RayJob running the training.")
    ray_cluster_name: str | None = Field(
        default=None,
        description="The RayCluster the RayJob created; recorded once the job leaves Pending "
        "(meanwhile Ready's message names the label to find it by).",
    )
    config_map_name: str | None = Field(default=None, description="The ConfigMap holding verl.yaml.")
    checkpoint_claim_name: str | None = Field(default=None, description="The PVC holding checkpoints.")
    export_job_name: str | None = Field(default=None, description="The converter Job.")
    preflight: PreflightStatus | None = Field(default=None, description="The preflight of the current spec.")
    start_time: datetime | None = Field(
        default=None, description="When KubeRay started the RayJob (recorded with rayClusterName).")
    completion_time: datetime | None = Field(default=None, description="When the job succeeded or failed.")
    restarts: int = Field(default=0, description="Retries of the RayJob so far.")
    checkpoint: CheckpointStatus | None = Field(default=None, description="The latest checkpoint.")
    progress: ProgressStatus | None = Field(default=None, description="Training progress.")
    guardrails: GuardrailsStatus | None = Field(
        default=None, description="Guardrail trips, rollbacks and suspension (spec.guardrails)."
    )
    export: ExportStatus | None = Field(default=None, description="The exported model.")
    rehearsal: RehearsalStatus | None = Field(default=None, description="The rehearsal's verdict (spec.rehearsal).")
    logs: LogsStatus | None = Field(default=None, description="Where the driver's log is.")
    runtime: AppliedRuntimeStatus | None = Field(
        default=None, description="The GRPORuntime the job took at its creation, and which fields came from it."
    )
    observed_generation: int | None = Field(default=None, description="metadata.generation last acted on.")
    spec_digests: dict[str, str] | None = Field(
        default=None,
        description="A digest of each spec field as of observedGeneration (scheduling by subfield), so the "
        "operator can tell which fields a later edit changed.",
    )
