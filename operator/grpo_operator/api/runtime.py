"""GRPORuntime (cluster-scoped): the defaults a cluster's admins set once for the jobs that name it.

Cluster-scoped only: the things a runtime holds (the GPU pools' taints and devices, the registry's pull secret
name, the queue, the storage class, the NCCL fabric) are the cluster's, set by whoever runs it; a team that wants
other values sets them on its jobs, whose fields win. A namespaced kind would add a second lookup, a second
default and an order between the two for no setting a job cannot already carry itself.

How a job's fields and its runtime's merge is docs/runtimes.md's table; `grpo_operator.runtimes` implements it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from grpo_operator.api.base import IMAGE_MAX, LABEL_VALUE_MAX, ApiModel, Name
from grpo_operator.api.operations import MonitoringSpec
from grpo_operator.api.overrides import NetworkSpec, PodOverrides
from grpo_operator.api.pods import EnvVar, LocalObjectReference, PodMetadata

RUNTIME_KIND = "GRPORuntime"
RUNTIME_PLURAL = "grporuntimes"


class GRPORuntimeSpec(ApiModel):
    """Defaults for the GRPOJobs that name this runtime (spec.runtime), or for every job naming none when it is
    the default. Each field has the GRPOJob field of the same meaning; the job's own value wins."""

    default: bool = Field(
        default=False,
        description="The runtime of every GRPOJob that names none. At most one runtime may be the default; with "
        "two, jobs naming none are refused until one is unmarked.",
    )
    image: Annotated[str, Field(min_length=1, max_length=IMAGE_MAX)] | None = Field(
        default=None, description="Trainer image (GRPOJob spec.image)."
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None,
        max_length=16,
        description="Pull secrets, by name in the job's namespace (spec.imagePullSecrets; merged by name).",
    )
    service_account_name: Name | None = Field(
        default=None, description="ServiceAccount of the trainer pods (spec.serviceAccountName)."
    )
    priority_class_name: Name | None = Field(
        default=None, description="PriorityClass of every pod (spec.scheduling.priorityClassName)."
    )
    queue_name: Annotated[str, Field(max_length=LABEL_VALUE_MAX)] | None = Field(
        default=None, description="Kueue LocalQueue (spec.scheduling.queueName)."
    )
    checkpoint_storage_class_name: Name | None = Field(
        default=None,
        description="StorageClass of a checkpoint PVC the operator creates (spec.checkpoints.volume."
        "storageClassName); not used for a job that names an existing claim.",
    )
    shared_checkpoint_storage_class_name: Name | None = Field(
        default=None,
        description="StorageClass of a checkpoint PVC the operator creates ReadWriteMany: for a job whose "
        "several actor pods write checkpoints from their own nodes (or that asks for ReadWriteMany), where block "
        "storage (checkpointStorageClassName) would never bind. Empty: such jobs get checkpointStorageClassName "
        "too.",
    )
    env: list[EnvVar] | None = Field(
        default=None, max_length=64, description="Environment of every trainer container (spec.env; merged by name)."
    )
    pod_metadata: PodMetadata | None = Field(
        default=None, description="Labels and annotations of every pod (spec.podMetadata; merged by key)."
    )
    monitoring: MonitoringSpec | None = Field(
        default=None, description="Alert thresholds (spec.monitoring; merged field by field)."
    )
    pods: PodOverrides | None = Field(
        default=None, description="Per-role pod overrides (spec.pods; merged role by role, field by field)."
    )
    network: NetworkSpec | None = Field(
        default=None, description="Multi-node networking (spec.network; a job's network replaces it whole)."
    )


class GRPORuntime(BaseModel):
    """A GRPORuntime object as the apiserver returns it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    api_version: str = Field(default="grpo.dev/v1alpha1", description="grpo.dev/v1alpha1")
    kind: str = Field(default=RUNTIME_KIND, description=RUNTIME_KIND)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: GRPORuntimeSpec = Field(default_factory=GRPORuntimeSpec, description="Defaults for jobs.")
