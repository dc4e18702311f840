"""The GRPOJob API (grpo.dev/v1alpha1): the single source of truth.

These pydantic models are, at once, the CRD's OpenAPI schema (see ``crd.py``), its defaults,
its ``kubectl explain`` text (every field's description) and its server-side CEL validation
(``x-kubernetes-validations`` attached beside the fields they judge). The operator parses a
GRPOJob body with ``GRPOJob.model_validate(body)`` or just the spec with
``GRPOJobSpec.model_validate(body["spec"])``.

Attribute names are snake_case; JSON names are camelCase (aliases). ``populate_by_name`` lets
Python code and tests build specs with either spelling.

Every string, list and map in the spec is bounded (maxLength/maxItems/maxProperties): the
immutability rules compare whole subtrees with ``self == oldSelf`` and the apiserver rejects a
CRD whose CEL rules have an unbounded estimated cost.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Bounds shared by many fields. Chosen from the Kubernetes limits they mirror.
NAME_MAX = 253  # DNS-1123 subdomain: PVC, ConfigMap, Secret, ServiceAccount, PriorityClass names
LABEL_VALUE_MAX = 63
PATH_MAX = 1024
IMAGE_MAX = 512
QUANTITY_MAX = 32
# KubeRay refuses RayJob names above 47 characters (MaxRayJobNameLength); the RayJob takes the
# GRPOJob's name, so the GRPOJob inherits the limit.
JOB_NAME_MAX = 47

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# Kubernetes resource.Quantity as the apiserver's OpenAPI spells it, minus the sign: a negative
# CPU or memory is never meant.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def cel(rule: str, message: str) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry. Messages name the field and the fix."""
    return {"rule": rule, "message": message}


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules; ``crd.py`` keeps them on the inlined schema."""
    return {"x-kubernetes-validations": list(rules)}


def immutable(field: str) -> dict[str, Any]:
    """A transition rule that freezes a subtree once the GRPOJob exists (checkpoints: the operator may
    have created the job's PVC already, and never deletes it on its own)."""
    return validations(
        cel(
            "self == oldSelf",
            f"spec.{field} is immutable once the GRPOJob exists; delete the GRPOJob and create a new one "
            "(its checkpoints stay on the checkpoint PVC unless checkpoints.deletePolicy is Delete)",
        )
    )


# Phases in which nothing has trained yet: no RayJob exists, and the operator renders the job's children
# again from an edited spec (and runs the preflight again). From Pending on, the RayJob runs what the
# spec said then, so the fields it was made from are frozen (frozen_once_training).
EDITABLE_PHASES = ("Invalid", "Preflight")
_EDITABLE = (
    "(has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase in "
    f"[{', '.join(repr(p) for p in EDITABLE_PHASES)}])"
)
_FROZEN_MESSAGE = (
    "spec.{field} is immutable once training has started (phase Pending or later: the RayJob runs what it "
    "said then); it can be edited while the job is Invalid or in Preflight; otherwise delete the GRPOJob and create "
    "a new one (its checkpoints stay on the checkpoint PVC unless checkpoints.deletePolicy is Delete)"
)


def frozen_once_training(field: str, optional: bool = False) -> dict[str, str]:
    """A root-level transition rule: spec.<field> may change only while the job is Invalid or in Preflight.

    At the root because only there can a rule read the status beside the spec (a status update keeps
    the spec, a spec update keeps the status, so oldSelf.status is the status the edit meets).
    """
    new, old = f"self.spec.{field}", f"oldSelf.spec.{field}"
    unchanged = f"{new} == {old}"
    if optional:
        leaf = field.rsplit(".", 1)
        parent_new = f"self.spec.{leaf[0]}" if len(leaf) == 2 else "self.spec"
        parent_old = f"oldSelf.spec.{leaf[0]}" if len(leaf) == 2 else "oldSelf.spec"
        unchanged = (
            f"has({parent_new}.{leaf[-1]}) == has({parent_old}.{leaf[-1]}) && "
            f"(!has({parent_new}.{leaf[-1]}) || {new} == {old})"
        )
    return cel(f"{_EDITABLE} || ({unchanged})", _FROZEN_MESSAGE.format(field=field))


class ApiModel(BaseModel):
    """Base: camelCase JSON, snake_case Python, unknown fields refused, values immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=DNS1123_SUBDOMAIN)]
RelPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=PATH_MAX,
        json_schema_extra=validations(
            cel(
                "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",
                "must be a path relative to the volume's root: drop the leading '/' and any '..'",
            )
        ),
    ),
]
Quantity = int | Annotated[str, Field(max_length=QUANTITY_MAX, pattern=QUANTITY_PATTERN)]
LabelMap = Annotated[dict[str, Annotated[str, Field(max_length=LABEL_VALUE_MAX)]], Field(max_length=32)]


# --------------------------------------------------------------------------- model and data


class ModelSource(ApiModel):
    """A HuggingFace model directory on a PersistentVolumeClaim, mounted read-only."""

    claim_name: Name = Field(
        description="Name of a PersistentVolumeClaim in the job's namespace holding the model; mounted read-only."
    )
    path: RelPath = Field(
        description="Directory of the HuggingFace model (config.json, weights, tokenizer) relative to the "
        "claim's root, e.g. Qwen2-7B-Instruct."
    )


class DataSpec(ApiModel):
    """Training prompts on a PVC and the sequence/batch sizes verl trains with."""

    claim_name: Name = Field(
        description="Name of a PersistentVolumeClaim holding the datasets; mounted read-only at /data."
    )
    train_files: list[RelPath] = Field(
        min_length=1,
        max_length=64,
        description="Training files relative to the claim's root. .jsonl files are converted to parquet by "
        "the trainer; .parquet files are used as they are.",
    )
    val_files: list[RelPath] = Field(
        default_factory=list,
        max_length=64,
        description="Optional validation files. Validation is off by default; when empty the trainer "
        "generates a one-row file because verl still reads data.val_files.",
    )
    prompt_key: str = Field(
        default="prompt",
        min_length=1,
        max_length=128,
        description="Column holding the prompt (verl data.prompt_key).",
    )
    max_prompt_length: int = Field(
        default=512, ge=1, le=131072, description="Maximum prompt tokens (verl data.max_prompt_length)."
    )
    max_response_length: int = Field(
        default=1024,
        ge=1,
        le=131072,
        description="Maximum generated tokens per response (verl data.max_response_length).",
    )
    train_batch_size: int = Field(
        default=256,
        ge=1,
        le=1048576,
        description="Prompts per training step (verl data.train_batch_size); each prompt is sampled "
        "algorithm.groupSize times.",
    )
    oversize: Literal["drop", "refuse"] = Field(
        default="drop",
        description="What the trainer does with prompts longer than maxPromptLength tokens: drop them "
        "(logged with a count) or refuse to start.",
    )


class TrainingSpec(ApiModel):
    """How long to train: exactly one of totalSteps or epochs."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.totalSteps) != has(self.epochs)",
                "spec.training needs exactly one of totalSteps or epochs; set one and remove the other",
            )
        )
    )

    total_steps: int | None = Field(
        default=None, ge=1, le=10_000_000, description="Training steps (verl trainer.total_training_steps)."
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Passes over the training data (verl trainer.total_epochs).",
    )


# --------------------------------------------------------------------------- algorithm


class KLLoss(ApiModel):
    """KL divergence to the reference policy, added to the actor loss (GRPO's usual choice)."""

    enabled: bool = Field(default=True, description="Add the KL loss (verl actor.use_kl_loss).")
    coef: float = Field(default=0.001, ge=0, le=10, description="KL loss weight (verl actor.kl_loss_coef).")
    type: Literal["kl", "abs", "mse", "low_var_kl", "full"] = Field(
        default="low_var_kl", description="KL estimator (verl actor.kl_loss_type)."
    )


class AlgorithmSpec(ApiModel):
    """GRPO settings."""

    adv_estimator: Literal["grpo", "rloo", "reinforce_plus_plus", "remax", "opo", "grpo_passk"] = Field(
        default="grpo", description="Advantage estimator (verl algorithm.adv_estimator)."
    )
    group_size: int = Field(
        default=8,
        ge=2,
        le=1024,
        description="Responses sampled per prompt; GRPO normalises rewards within each group "
        "(verl actor_rollout_ref.rollout.n).",
    )
    kl_loss: KLLoss = Field(default_factory=KLLoss, description="KL loss to the reference policy.")
    mini_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=1048576,
        description="Prompts per policy update (verl actor.ppo_mini_batch_size). Defaults to "
        "data.trainBatchSize: one on-policy update per step. Must not exceed data.trainBatchSize.",
    )
    micro_batch_size_per_gpu: int = Field(
        default=4,
        ge=1,
        le=4096,
        alias="microBatchSizePerGPU",
        description="Sequences per forward/backward pass on one GPU (verl actor.ppo_micro_batch_size_per_gpu "
        "and the log-prob micro batches of actor and reference). Lower it when a GPU runs out of memory.",
    )
    learning_rate: float = Field(default=1e-6, gt=0, le=1, description="Actor learning rate (verl actor.optim.lr).")


# --------------------------------------------------------------------------- rollout


class RolloutSpec(ApiModel):
    """The generation engine that samples responses."""

    engine: Literal["vllm"] = Field(
        default="vllm",
        description="Inference engine (verl actor_rollout_ref.rollout.name). The trainer image ships vLLM.",
    )
    tensor_parallel_size: int = Field(
        default=2,
        ge=1,
        le=64,
        description="GPUs per vLLM engine (verl rollout.tensor_model_parallel_size). Must divide the GPUs "
        "per pod of the role that runs the rollout (rollout in disaggregated mode, actor in colocated).",
    )
    gpu_memory_utilization: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Fraction of GPU memory vLLM may take (verl rollout.gpu_memory_utilization).",
    )
    temperature: float = Field(default=0.7, ge=0, le=10, description="Sampling temperature.")
    top_p: float = Field(default=0.9, gt=0, le=1, description="Nucleus sampling top_p.")
    chunked_prefill: bool = Field(
        default=True, description="vLLM chunked prefill (verl rollout.enable_chunked_prefill)."
    )
    max_num_batched_tokens: int = Field(
        default=16384,
        ge=1,
        le=1048576,
        description="vLLM max_num_batched_tokens (verl rollout.max_num_batched_tokens).",
    )
    max_model_len_factor: float = Field(
        default=1.2,
        ge=1,
        le=8,
        description="vLLM max_model_len = (maxPromptLength + maxResponseLength) x this factor, clamped "
        "by the "
        "trainer to the model's max_position_embeddings with a warning.",
    )


# --------------------------------------------------------------------------- reward


class RewardFunction(ApiModel):
    """A Python reward function from a ConfigMap in the job's namespace."""

    config_map_name: Name = Field(description="ConfigMap holding the Python file; mounted at /etc/grpo/reward/.")
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key of the ConfigMap whose value is the Python file, e.g. reward.py.",
    )
    name: str = Field(
        default="compute_score",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Function to call, with verl's compute_score(data_source, solution_str, ground_truth, "
        "extra_info) signature (verl reward.custom_reward_function.name).",
    )


class RewardSpec(ApiModel):
    """How responses are scored."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type != 'function' || has(self.function)",
                "reward.type=function needs reward.function {configMapName, key, name}; add it or choose "
                "another reward.type",
            ),
            cel(
                "self.type != 'model' || has(self.model)",
                "reward.type=model needs reward.model {claimName, path}; add it or choose another reward.type",
            ),
            cel(
                "self.type == 'function' || !has(self.function)",
                "reward.function is only read when reward.type=function; remove reward.function or set "
                "reward.type=function",
            ),
            cel(
                "self.type == 'model' || !has(self.model)",
                "reward.model is only read when reward.type=model; remove reward.model or set reward.type=model",
            ),
        )
    )

    type: Literal["length", "function", "model"] = Field(
        default="length",
        description="length: the trainer's built-in response-length reward (runs on CPU). function: a Python "
        "function from a ConfigMap (runs on CPU). model: a reward model served on GPUs.",
    )
    function: RewardFunction | None = Field(
        default=None, description="The reward function; required when type is function."
    )
    model: ModelSource | None = Field(
        default=None,
        description="The reward model; required when type is model. Mounted at /models when on the policy "
        "model's claim, else at /reward-models.",
    )


# --------------------------------------------------------------------------- placement


class Toleration(ApiModel):
    """A Kubernetes toleration (core/v1 Toleration)."""

    key: str | None = Field(default=None, max_length=NAME_MAX, description="Taint key; empty matches all.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (Kubernetes treats empty as Equal)."
    )
    value: str | None = Field(default=None, max_length=LABEL_VALUE_MAX, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty matches all."
    )
    toleration_seconds: int | None = Field(default=None, ge=0, description="How long a NoExecute taint is tolerated.")


class PodResources(ApiModel):
    """CPU and memory of each pod of a role (requests = limits). GPUs come from the role's gpus."""

    cpu: Quantity | None = Field(
        default=None,
        description="CPUs per pod. Defaults to 3 per GPU + 1. Must be at least 3 per GPU: verl asks Ray for "
        "3 CPUs with every GPU it places.",
    )
    memory: Quantity | None = Field(default=None, description="Memory per pod. Defaults to 32Gi per GPU + 8Gi.")


class RoleSpec(ApiModel):
    """One worker group of the Ray cluster: replicas pods of gpus GPUs each, pinned to nodes."""

    gpus: int = Field(ge=1, le=64, description="GPUs per pod; must fit on one node (placement.gpusPerNode).")
    replicas: int = Field(default=1, ge=1, le=256, description="Pods of this role (one per node).")
    node_selector: LabelMap = Field(
        default_factory=dict,
        description="Node labels the role's pods require, e.g. {grpo.dev/pool: train}.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=16, description="Taints the role's pods tolerate."
    )
    resources: PodResources = Field(default_factory=PodResources, description="CPU and memory overrides per pod.")


class HeadResources(ApiModel):
    """CPU and memory of the Ray head pod (requests = limits)."""

    cpu: Quantity | None = Field(
        default=None,
        description="CPUs of the head pod. Defaults to 8: it runs the verl driver, the data loader and "
        "rule-based rewards.",
    )
    memory: Quantity | None = Field(default=None, description="Memory of the head pod. Defaults to 32Gi.")


class HeadSpec(ApiModel):
    """The Ray head pod: no GPUs; runs the verl driver, the data loader and CPU rewards."""

    node_selector: LabelMap = Field(default_factory=dict, description="Node labels the head pod requires.")
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=16, description="Taints the head pod tolerates."
    )
    resources: HeadResources = Field(default_factory=HeadResources, description="CPU and memory of the head pod.")


class Roles(ApiModel):
    """Worker groups by role. Which roles are allowed depends on placement.mode and reward.type."""

    actor: RoleSpec | None = Field(
        default=None,
        description="Actor (policy training, plus reference and vLLM in colocated mode). In colocated "
        "mode it "
        "defaults to one pod with placement.gpusPerNode GPUs.",
    )
    rollout: RoleSpec | None = Field(
        default=None, description="vLLM generation; disaggregated mode only (required there)."
    )
    reward: RoleSpec | None = Field(
        default=None,
        description="Reward-model GPUs; only for reward.type=model (without it the reward model shares the "
        "actor's GPUs).",
    )


def _has_role(role: str, placement: str = "self") -> str:
    # has() on a chain errors when a middle link is missing, so test roles first.
    return f"(has({placement}.roles) && has({placement}.roles.{role}))"


def _fits_node(role: str) -> dict[str, str]:
    return cel(
        f"!{_has_role(role)} || self.roles.{role}.gpus <= self.gpusPerNode",
        f"placement.roles.{role}.gpus must not exceed placement.gpusPerNode (a pod cannot span nodes); "
        f"lower gpus and raise placement.roles.{role}.replicas instead",
    )


class PlacementSpec(ApiModel):
    """Where the actor, rollout and reward workers run."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            _fits_node("actor"),
            _fits_node("rollout"),
            _fits_node("reward"),
            cel(
                f"self.mode != 'disaggregated' || ({_has_role('actor')} && {_has_role('rollout')})",
                "placement.mode=disaggregated needs placement.roles.actor and placement.roles.rollout; add "
                "both or use placement.mode=colocated",
            ),
            cel(
                f"self.mode != 'colocated' || !{_has_role('rollout')}",
                "placement.mode=colocated runs vLLM on the actor's GPUs; remove placement.roles.rollout "
                "or use "
                "placement.mode=disaggregated",
            ),
        )
    )

    mode: Literal["colocated", "disaggregated"] = Field(
        default="colocated",
        description="colocated: actor, reference and vLLM time-share the same GPUs (verl's hybrid "
        "engine; the "
        "efficient default). disaggregated: separate actor and rollout worker groups.",
    )
    gpus_per_node: int = Field(default=8, ge=1, le=64, description="GPUs on each node of the pools used.")
    gpu_memory: Quantity | None = Field(
        default=None,
        description="Memory of one GPU, e.g. 80Gi, for the preflight's memory-fit estimate. Defaults to the "
        "smallest nvidia.com/gpu.memory label (MiB, set by NVIDIA's GPU feature discovery) of the nodes each "
        "role can use; without either the fit is not checked.",
    )
    roles: Roles = Field(default_factory=Roles, description="Worker groups by role.")
    head: HeadSpec = Field(default_factory=HeadSpec, description="The Ray head pod (no GPUs).")


# --------------------------------------------------------------------------- checkpoints, export


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


# --------------------------------------------------------------------------- scheduling and pod settings


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


class LocalObjectReference(ApiModel):
    """A reference to an object in the job's namespace by name."""

    name: Name = Field(description="Name of the object.")


class PodMetadata(ApiModel):
    """Extra labels and annotations for every pod the job creates (Ray head, workers, converter)."""

    labels: LabelMap = Field(
        default_factory=dict,
        description="Labels added to every pod; the operator's own labels (grpo.dev/*, app.kubernetes.io/*) win.",
    )
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations added to every pod, e.g. for sidecar injection or cost tags."
    )


class EnvVar(ApiModel):
    """An environment variable for every trainer container."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.value) != has(self.valueFrom)",
                "env entries need exactly one of value or valueFrom",
            )
        )
    )

    name: str = Field(
        min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: Annotated[str, Field(max_length=32768)] | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef), "
        "passed through to the pods as written.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


# --------------------------------------------------------------------------- monitoring


class MonitoringSpec(ApiModel):
    """Thresholds of the chart's training-health alerts for this job, relative to the job's own early steps.

    Editable while the job runs: the operator exports them for the alert rules at once.
    """

    entropy_collapse_fraction: float = Field(
        default=0.3,
        gt=0,
        lt=1,
        description="GRPOJobEntropyCollapsed fires when the policy entropy stays below this fraction of the median "
        "entropy of the job's first 10 steps for 10 minutes. Healthy runs lose much of their entropy early; "
        "a collapse goes far below.",
    )
    kl_growth_factor: float = Field(
        default=4.0,
        gt=1,
        le=1000,
        description="GRPOJobKLRising fires when the KL loss to the reference is more than this factor above its "
        "value 30 minutes earlier, for 10 minutes (once the job is past its first 10 steps, whose KL "
        "grows from zero). A healthy KL grows slowly.",
    )


# --------------------------------------------------------------------------- guardrails

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


_SPEC_TOP_LEVEL_OPTIONALS = ("image", "serviceAccountName", "imagePullSecrets", "env", "podMetadata")
# Frozen once training has started (see frozen_once_training); spec.checkpoints from creation on.
FROZEN_ONCE_TRAINING = (
    "guardrails",
    "model",
    "data",
    "training",
    "algorithm",
    "rollout",
    "reward",
    "placement",
    "export",
    "rehearsal",
    "security",
)
FROZEN_OPTIONALS_ONCE_TRAINING = (
    *_SPEC_TOP_LEVEL_OPTIONALS,
    "scheduling.queueName",
    "scheduling.priorityClassName",
    "scheduling.activeDeadlineSeconds",
    "scheduling.retries",
    "scheduling.keepFailedClusterSeconds",
)

# The quantities verl 0.9.1 divides one step's sequences by (verl/utils/config.py validate_config,
# verl/workers/engine_workers.py train_mini_batch, verl/workers/engine/utils.py prepare_micro_batches).
# The actor's FSDP world is every actor GPU: one data-parallel rank per GPU.
ACTOR_GPUS_CEL = (
    f"({_has_role('actor', 'self.placement')} ? "
    "self.placement.roles.actor.gpus * self.placement.roles.actor.replicas : self.placement.gpusPerNode)"
)
MINI_BATCH_CEL = "(has(self.algorithm.miniBatchSize) ? self.algorithm.miniBatchSize : self.data.trainBatchSize)"
_STEP_SEQUENCES_CEL = "self.data.trainBatchSize * self.algorithm.groupSize"
_UPDATE_SEQUENCES_CEL = f"{MINI_BATCH_CEL} * self.algorithm.groupSize"

_DETECTORS_CEL = ("nonFinite", "klRunaway", "gradSpike", "policyCollapse", "degenerateBatch")
# Some detector acts: the job's mode is act (and the detector does not say observe), or the detector says act.
_ACTS_CEL = " || ".join(
    f"(has(self.guardrails.detectors.{d}.mode) ? self.guardrails.detectors.{d}.mode == 'act' : "
    "self.guardrails.mode == 'act')"
    for d in _DETECTORS_CEL
)

SPEC_RULE_MESSAGES = {
    "step": "data.trainBatchSize x algorithm.groupSize (the sequences of one step) must be a multiple of the "
    "actor's GPUs (placement.roles.actor.gpus x replicas, default placement.gpusPerNode): verl 0.9.1 refuses "
    "a real_train_batch_size it cannot split evenly over them; change data.trainBatchSize, "
    "algorithm.groupSize or the actor's GPUs",
    "update": "algorithm.miniBatchSize (default data.trainBatchSize) x algorithm.groupSize (the sequences of "
    "one policy update) must be a multiple of the actor's GPUs (placement.roles.actor.gpus x replicas, "
    "default placement.gpusPerNode): verl 0.9.1 splits every update evenly over them; change "
    "algorithm.miniBatchSize, algorithm.groupSize or the actor's GPUs",
    "micro": "algorithm.microBatchSizePerGPU must divide the sequences each actor GPU gets per update, "
    "algorithm.miniBatchSize (default data.trainBatchSize) x algorithm.groupSize / the actor's GPUs: "
    "verl 0.9.1 refuses micro batches that do not split it evenly; lower algorithm.microBatchSizePerGPU "
    "to a divisor of it",
    "temperature": "rollout.temperature=0 samples greedily: with algorithm.groupSize > 1 every response of a "
    "group is the same, so each group's rewards are equal, GRPO's advantage is zero and nothing trains; "
    "set rollout.temperature above 0 (0.7 to 1.0 is usual)",
    "kl_rollback": "guardrails.rollback.change=klCoef raises the KL loss coefficient, but algorithm.klLoss.enabled "
    "is false, so the change would do nothing; enable algorithm.klLoss or use change=learningRate",
    "act_resume": "guardrails in act mode roll back by resuming from a checkpoint, which checkpoints.resume=disable "
    "forbids; set checkpoints.resume to auto, or keep guardrails.mode (and every detector's mode) observe",
    "gpu_memory": "rollout.gpuMemoryUtilization must be below 1.0: vLLM starts only when that fraction of the "
    "whole GPU is free, and the CUDA context (in colocated mode also the actor's weights and optimizer "
    "state) always holds some of it; use 0.5 to 0.7 in colocated mode, at most 0.9 in disaggregated mode",
}


class GRPOJobSpec(ApiModel):
    """A GRPO post-training run: model, data, algorithm, rollout, reward, placement and checkpoints."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"self.reward.type != 'length' || !{_has_role('reward', 'self.placement')}",
                "a length reward runs on CPU; remove placement.roles.reward or use reward.type=model",
            ),
            cel(
                f"self.reward.type != 'function' || !{_has_role('reward', 'self.placement')}",
                "a function reward runs on CPU; remove placement.roles.reward or use reward.type=model",
            ),
            cel(
                f"!{_has_role('rollout', 'self.placement')} || "
                "self.placement.roles.rollout.gpus % self.rollout.tensorParallelSize == 0",
                "placement.roles.rollout.gpus must be a multiple of rollout.tensorParallelSize (each "
                "vLLM engine "
                "takes tensorParallelSize GPUs of one pod); change either",
            ),
            cel(
                "self.placement.mode != 'colocated' || "
                f"({_has_role('actor', 'self.placement')} ? self.placement.roles.actor.gpus : "
                f"self.placement.gpusPerNode)"
                " % self.rollout.tensorParallelSize == 0",
                "in colocated mode vLLM runs on the actor's GPUs: placement.roles.actor.gpus (default "
                "placement.gpusPerNode) must be a multiple of rollout.tensorParallelSize; change either",
            ),
            cel(
                f"self.placement.mode != 'disaggregated' || self.reward.type != 'model' || "
                f"{_has_role('reward', 'self.placement')}",
                "placement.mode=disaggregated with reward.type=model needs placement.roles.reward: verl's "
                "separate-async trainer cannot share the actor's GPUs with a reward model; add "
                "placement.roles.reward or use placement.mode=colocated",
            ),
            cel(
                "self.placement.mode != 'disaggregated' || !has(self.algorithm.miniBatchSize) || "
                "self.data.trainBatchSize % self.algorithm.miniBatchSize == 0",
                "placement.mode=disaggregated syncs weights to the rollout every "
                "data.trainBatchSize / algorithm.miniBatchSize updates, so data.trainBatchSize must be a "
                "multiple of algorithm.miniBatchSize; change either or remove algorithm.miniBatchSize",
            ),
            cel(f"({_STEP_SEQUENCES_CEL}) % {ACTOR_GPUS_CEL} == 0", SPEC_RULE_MESSAGES["step"]),
            cel(f"({_UPDATE_SEQUENCES_CEL}) % {ACTOR_GPUS_CEL} == 0", SPEC_RULE_MESSAGES["update"]),
            cel(
                # Judged only once the update splits evenly over the GPUs: one message at a time.
                f"({_UPDATE_SEQUENCES_CEL}) % {ACTOR_GPUS_CEL} != 0 || "
                f"(({_UPDATE_SEQUENCES_CEL}) / {ACTOR_GPUS_CEL}) % self.algorithm.microBatchSizePerGPU == 0",
                SPEC_RULE_MESSAGES["micro"],
            ),
            cel("self.algorithm.groupSize < 2 || self.rollout.temperature > 0.0", SPEC_RULE_MESSAGES["temperature"]),
            cel("self.rollout.gpuMemoryUtilization < 1.0", SPEC_RULE_MESSAGES["gpu_memory"]),
            cel("self.guardrails.rollback.change != 'klCoef' || self.algorithm.klLoss.enabled",
                SPEC_RULE_MESSAGES["kl_rollback"]),
            cel(f"!({_ACTS_CEL}) || self.checkpoints.resume == 'auto'", SPEC_RULE_MESSAGES["act_resume"]),
            cel(
                "!has(self.algorithm.miniBatchSize) || self.algorithm.miniBatchSize <= self.data.trainBatchSize",
                "algorithm.miniBatchSize must not exceed data.trainBatchSize; lower it or remove it (it "
                "defaults "
                "to data.trainBatchSize)",
            ),
        )
    )

    image: Annotated[str, Field(min_length=1, max_length=IMAGE_MAX)] | None = Field(
        default=None, description="Trainer image; the operator's configured default when empty."
    )
    service_account_name: Name | None = Field(
        default=None,
        description="ServiceAccount of the trainer pods. When empty the operator creates <job>-trainer, "
        "which "
        "may only read the GRPOJob and patch its status.",
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, max_length=16, description="Secrets for pulling the trainer image."
    )
    env: list[EnvVar] | None = Field(
        default=None, max_length=64, description="Extra environment variables for every trainer container."
    )
    pod_metadata: PodMetadata | None = Field(
        default=None, description="Extra labels and annotations for every pod of the job."
    )
    model: ModelSource = Field(description="The policy model to train (verl actor_rollout_ref.model.path).")
    data: DataSpec = Field(description="Training data and sequence/batch sizes.")
    training: TrainingSpec = Field(description="How long to train: totalSteps or epochs.")
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, description="GRPO settings.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="vLLM generation settings.")
    reward: RewardSpec = Field(default_factory=RewardSpec, description="How responses are scored.")
    placement: PlacementSpec = Field(
        default_factory=PlacementSpec,
        description="Placement mode, GPUs per node and the worker group of each role.",
    )
    checkpoints: CheckpointSpec = Field(
        default_factory=CheckpointSpec,
        description="Checkpoint frequency, retention and volume.",
        json_schema_extra=immutable("checkpoints"),
    )
    export: ExportSpec = Field(
        default_factory=ExportSpec, description="Conversion of the final checkpoint to a HuggingFace model."
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec, description="Queue, priority, suspend, deadline and retries."
    )
    rehearsal: bool = Field(
        default=False,
        description="Rehearse instead of train: the RayJob runs the job's real entrypoint up to the point of "
        "training (config checked by verl, every pool placed on its role's pods, GPUs per role, model, data and "
        "reward function read from the real volumes, the checkpoint volume shared by the driver and the actors), "
        "then exits with a verdict (status.rehearsal, the Rehearsal condition). Nothing is trained or exported, "
        "and a failed rehearsal is not retried.",
    )
    security: SecuritySpec = Field(
        default_factory=SecuritySpec,
        description="Access to the job's Ray cluster.",
    )
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec, description="Thresholds of the training-health alerts (editable)."
    )
    guardrails: GuardrailsSpec = Field(
        default_factory=GuardrailsSpec,
        description="Per-step health checks of the run and what the operator does when one trips.",
    )
    preflight: PreflightSpec = Field(
        default_factory=PreflightSpec,
        description="The CPU-only check of the model, data, reward function, checkpoint volume and memory fit "
        "that runs before the RayJob takes any GPU.",
    )
    verl: dict[str, Any] = Field(
        default_factory=dict,
        max_length=256,
        description="Raw verl overrides as dotted keys (e.g. actor_rollout_ref.actor.optim.lr: 1e-6), "
        "applied "
        "last. The escape hatch: keys are passed to verl unchecked by the operator; the trainer refuses "
        "unknown "
        "keys. Not covered by the immutability rules, but read only when the job is created.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


# --------------------------------------------------------------------------- status


Phase = Literal["Preflight", "Pending", "Running", "Suspended", "Exporting", "Succeeded", "Failed", "Invalid"]


class StatusModel(BaseModel):
    """Status parts: camelCase JSON, mutable (handlers build them), unknown fields ignored so an
    older operator can read a status written by a newer one."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


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
    observed_generation: int | None = Field(default=None, description="metadata.generation last acted on.")
    spec_digests: dict[str, str] | None = Field(
        default=None,
        description="A digest of each spec field as of observedGeneration (scheduling by subfield), so the "
        "operator can tell which fields a later edit changed.",
    )


class GRPOJob(BaseModel):
    """A GRPOJob object as the apiserver returns it."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        json_schema_extra=validations(
            *(frozen_once_training(f) for f in FROZEN_ONCE_TRAINING),
            *(frozen_once_training(f, optional=True) for f in FROZEN_OPTIONALS_ONCE_TRAINING),
            cel(
                f"self.metadata.name.size() <= {JOB_NAME_MAX}",
                f"metadata.name must be at most {JOB_NAME_MAX} characters: the RayJob takes the same "
                f"name and "
                "KubeRay limits RayJob names to 47; choose a shorter name",
            )
        ),
    )

    api_version: str = Field(default="grpo.dev/v1alpha1", description="grpo.dev/v1alpha1")
    kind: str = Field(default="GRPOJob", description="GRPOJob")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: GRPOJobSpec = Field(description="What to train and how.")
    status: GRPOJobStatus | None = Field(default=None, description="What the operator observed.")
