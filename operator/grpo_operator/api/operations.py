"""How a job is run around its training: queueing, suspension and retries, the preflight before the
RayJob, access to its Ray cluster and the thresholds of its health alerts."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from grpo_operator.api.base import LABEL_VALUE_MAX, ApiModel, Name, Quantity


class SchedulingSpec(ApiModel):
    """Queueing, priority, deadline and retries. Once training has started, only suspend may change."""

    queue_name: Annotated[str, Field(max_length=LABEL_VALUE_MAX)] | None = Field(
        default=None,
        description="Kueue LocalQueue; sets the kueue.x-k8s.io/queue-name label on the RayJob.",
    )
    priority_class_name: Name | None = Field(default=None, description="PriorityClass of every pod.")
    suspend: bool = Field(
        default=False,
        description="Suspend the job (its pods are deleted; it resumes from the latest checkpoint when "
        "set back "
        "to false).",
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, le=2_147_483_647, description="Wall-clock limit of the RayJob in seconds."
    )
    retries: int = Field(
        default=2,
        ge=0,
        le=100,
        description="Times a failed run is retried (RayJob backoffLimit); each retry resumes from the latest "
        "checkpoint. A rehearsal is never retried.",
    )
    keep_failed_cluster_seconds: int = Field(
        default=300,
        ge=0,
        le=604_800,
        description="How long the Ray cluster (its pods, their logs and the Ray dashboard) is kept after the "
        "last attempt failed, for debugging (KubeRay's ttlSecondsAfterFinished); 0 deletes it at once. After "
        "success it is deleted at once. The driver's log stays in the submitter Job either way (status.logs).",
    )


class PreflightResources(ApiModel):
    """CPU and memory of the preflight pod (requests = limits)."""

    cpu: Quantity = Field(default="2", description="CPUs of the preflight pod: it tokenizes every prompt.")
    memory: Quantity = Field(
        default="8Gi", description="Memory of the preflight pod: verl, the tokenizer and one data file at a time."
    )


class PreflightSpec(ApiModel):
    """A CPU-only Job from the trainer image that runs `grpo-train --preflight` before the RayJob exists."""

    enabled: bool = Field(
        default=True,
        description="Run the preflight. When false the RayJob is created as soon as the spec is accepted, and "
        "what the preflight would have found fails the job on its GPUs instead.",
    )
    timeout_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="Deadline of the preflight Job (activeDeadlineSeconds); past it the preflight fails.",
    )
    resources: PreflightResources = Field(
        default_factory=PreflightResources, description="CPU and memory of the preflight pod."
    )


class SecuritySpec(ApiModel):
    """Who may run code in the job's Ray cluster (docs/security.md)."""

    ray_auth: Literal["token", "disabled"] = Field(
        default="token",
        description="Ray token authentication (Ray >= 2.52). token: KubeRay (v1.5.1 or later) makes a random "
        "token in a Secret owned by the job's RayCluster and gives it to every Ray container and the submitter; "
        "the dashboard's job API and the GCS refuse any caller without it. disabled: anything that reaches "
        "the Ray pods' network can submit code that runs with the job's service account, model, data and "
        "checkpoints; only for a KubeRay older than v1.5.1 or a client outside the job that cannot send the token.",
    )


# The alert thresholds where neither the job nor its runtime sets one (no CRD default: a defaulted field would
# always be "set by the job", and a runtime's threshold could never apply).
MONITORING_DEFAULTS: dict[str, float] = {"entropyCollapseFraction": 0.3, "klGrowthFactor": 4.0}


class MonitoringSpec(ApiModel):
    """Thresholds of the chart's training-health alerts for this job, relative to the job's own early steps.

    Editable while the job runs: the operator exports them for the alert rules at once.
    """

    entropy_collapse_fraction: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="GRPOJobEntropyCollapsed fires when the policy entropy stays below this fraction of the median "
        "entropy of the job's first 10 steps for 10 minutes. Healthy runs lose much of their entropy early; "
        "a collapse goes far below. Default 0.3 (the runtime's when it sets one).",
    )
    kl_growth_factor: float | None = Field(
        default=None,
        gt=1,
        le=1000,
        description="GRPOJobKLRising fires when the KL loss to the reference is more than this factor above its "
        "value 30 minutes earlier, for 10 minutes (once the job is past its first 10 steps, whose KL "
        "grows from zero). A healthy KL grows slowly. Default 4 (the runtime's when it sets one).",
    )
