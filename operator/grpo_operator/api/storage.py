"""The job's volumes after the model and data: checkpoints (where, how many, what to resume from) and
the export of the final checkpoint as a HuggingFace model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from grpo_operator.api.base import (
    DNS1123_SUBDOMAIN,
    JOB_NAME_MAX,
    QUANTITY_MAX,
    QUANTITY_PATTERN,
    ApiModel,
    LabelMap,
    Name,
    Quantity,
    RelPath,
    cel,
    validations,
)
from grpo_operator.api.placement import Toleration


class VolumeSpec(ApiModel):
    """An existing claim, or a new PVC the operator creates as <job>-checkpoints.

    Every job keeps its checkpoints in its own directory of the claim, <namespace>/<name>, so jobs can
    share a team claim without resuming, pruning or exporting each other's steps.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(has(self.claimName) && has(self.size))",
                "checkpoints.volume takes claimName (an existing PVC) or size (a new PVC), not both; remove one "
                "(with neither, the new PVC is sized for the model's checkpoints)",
            ),
            cel(
                "!has(self.claimName) || (!has(self.storageClassName) && !has(self.accessModes))",
                "checkpoints.volume.storageClassName and accessModes only apply to a new PVC; "
                "remove them when using claimName",
            ),
            cel(
                "!has(self.accessModes) || !self.accessModes.exists(m, m == 'ReadWriteOncePod')",
                "checkpoints.volume.accessModes: ReadWriteOncePod lets one pod mount the claim, but the Ray "
                "head and every actor pod write checkpoints; use ReadWriteOnce (one actor pod) or "
                "ReadWriteMany",
            ),
        )
    )

    claim_name: Name | None = Field(
        default=None,
        description="An existing PersistentVolumeClaim to use. The job writes under <namespace>/<name>/ in it. "
        "A ReadWriteOnce claim works with one actor pod (the head is then placed on that pod's node); more "
        "actor pods need ReadWriteMany.",
    )
    size: Annotated[str, Field(max_length=QUANTITY_MAX, pattern=QUANTITY_PATTERN)] | None = Field(
        default=None, description="Size of a new PVC, e.g. 500Gi; the preflight refuses one too small for keep "
        "checkpoints plus the one being written. Empty: the preflight sizes it for the model (12 bytes per "
        "parameter a checkpoint, keep + 1 of them and a tenth more; 100Gi at least, and when it cannot tell)."
    )
    storage_class_name: Name | None = Field(
        default=None, description="StorageClass of a new PVC; the cluster default when empty."
    )
    access_modes: list[Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="Access modes of a new PVC. The Ray head (verl's driver) and every actor pod write "
        "checkpoints. Defaults to ReadWriteOnce when the actor is one pod (the head is then placed on its "
        "node, so block storage such as EBS, PD or Azure Disk works), else ReadWriteMany (a shared "
        "filesystem: EFS, Filestore, Azure Files, NFS).",
    )


class ResumeFrom(ApiModel):
    """A warm start from a checkpoint this job did not write: another job's, or a directory on a claim."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.jobName) != has(self.path)",
                "checkpoints.resumeFrom needs exactly one of jobName (another GRPOJob's checkpoints) or path "
                "(a checkpoint directory on the claim); set one and remove the other",
            ),
        )
    )

    job_name: Annotated[str, Field(min_length=1, max_length=JOB_NAME_MAX, pattern=DNS1123_SUBDOMAIN)] | None = (
        Field(
            default=None,
            description="A GRPOJob of this namespace whose checkpoints to start from: its directory "
            "<namespace>/<jobName>/ on claimName.",
        )
    )
    path: RelPath | None = Field(
        default=None,
        description="A checkpoint directory relative to the claim's root: the directory holding "
        "global_step_N/ and latest_checkpointed_iteration.txt.",
    )
    claim_name: Name | None = Field(
        default=None,
        description="The claim holding that checkpoint (mounted read-only); this job's checkpoint claim when "
        "empty. A job that had its own PVC names it here: <jobName>-checkpoints.",
    )
    step: int | None = Field(
        default=None, ge=1, le=10_000_000, description="The step to start from; the latest saved one when empty."
    )


def _default_volume() -> VolumeSpec:
    return VolumeSpec()


class CheckpointSpec(ApiModel):
    """Checkpoints on a PVC, in the job's own directory: saved every saveEvery steps, resumed on retry."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.resumeFrom) || self.resume == 'auto'",
                "checkpoints.resumeFrom needs checkpoints.resume=auto (the job starts from it when it has no "
                "checkpoint of its own); remove resumeFrom or set resume to auto",
            ),
        )
    )

    save_every: int = Field(
        default=50, ge=1, le=1_000_000, description="Steps between checkpoints (verl trainer.save_freq)."
    )
    keep: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Checkpoints kept; older ones of this job are deleted (verl trainer.max_actor_ckpt_to_keep).",
    )
    volume: VolumeSpec = Field(default_factory=_default_volume, description="Where checkpoints live.")
    delete_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="Retain keeps a PVC the operator created after the GRPOJob is deleted (trained "
        "weights are "
        "never lost by accident); Delete removes it with the job. An existing claim is never deleted.",
    )
    resume: Literal["auto", "disable"] = Field(
        default="auto",
        description="auto resumes from the latest checkpoint in the job's directory (verl trainer.resume_mode), "
        "which is what makes a retry, or a GRPOJob re-created with the same name, continue instead of restart.",
    )
    resume_from: ResumeFrom | None = Field(
        default=None,
        description="Start from another job's checkpoint (model, optimizer and data position; training "
        "continues at that step) when this job has none of its own yet. A retry still resumes from this "
        "job's own latest checkpoint.",
    )


class ExportTarget(ApiModel):
    """Where the converted HuggingFace model is written."""

    claim_name: Name = Field(description="PersistentVolumeClaim to write the model to (mounted read-write).")
    path: RelPath = Field(description="Directory relative to the claim's root, e.g. exports/qwen2-7b-grpo.")


class ConverterResources(ApiModel):
    """CPU and memory of the converter pod (requests = limits)."""

    cpu: Quantity | None = Field(default=None, description="CPUs of the converter pod. Defaults to the head's.")
    memory: Quantity | None = Field(
        default=None,
        description="Memory of the converter pod; it holds about one safetensors shard (export.maxShardSize) at a "
        "time. Defaults to the head's.",
    )


class ExportSpec(ApiModel):
    """After training, convert the last checkpoint to HuggingFace safetensors with a converter Job."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!self.enabled || has(self.target)",
                "export.enabled=true needs export.target {claimName, path}; add it or set export.enabled=false",
            )
        )
    )

    enabled: bool = Field(default=False, description="Run the converter Job after training succeeds.")
    target: ExportTarget | None = Field(default=None, description="Where to write the model.")
    max_shard_size: str = Field(
        default="5GB",
        max_length=QUANTITY_MAX,
        pattern=r"^[0-9]+(\.[0-9]+)?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$",
        description="Largest safetensors shard, e.g. 5GB.",
    )
    dtype: Literal["bfloat16", "float32", "keep"] = Field(
        default="bfloat16",
        description="Data type of the exported floating-point weights; keep writes the checkpoint's own dtype.",
    )
    node_selector: LabelMap | None = Field(
        default=None,
        description="Node labels the converter pod requires. The converter is CPU work that holds one shard in "
        "memory at a time; by default it runs where the Ray head runs (placement.head.nodeSelector).",
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=16, description="Taints the converter pod tolerates (default: the head's)."
    )
    resources: ConverterResources | None = Field(
        default=None, description="CPU and memory of the converter pod (requests = limits)."
    )
