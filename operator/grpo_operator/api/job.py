"""The GRPOJob itself: the spec that gathers every section, the rules that span sections, and
the transition rules that freeze the spec once training has started."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from grpo_operator.api.base import IMAGE_MAX, JOB_NAME_MAX, ApiModel, Name, cel, validations
from grpo_operator.api.guardrails import GuardrailsSpec
from grpo_operator.api.operations import MonitoringSpec, PreflightSpec, SchedulingSpec, SecuritySpec
from grpo_operator.api.overrides import NetworkSpec, PodOverrides
from grpo_operator.api.placement import PlacementSpec, has_role
from grpo_operator.api.pods import EnvVar, LocalObjectReference, PodMetadata
from grpo_operator.api.status import GRPOJobStatus
from grpo_operator.api.storage import CheckpointSpec, ExportSpec
from grpo_operator.api.training import AlgorithmSpec, DataSpec, ModelSource, RewardSpec, RolloutSpec, TrainingSpec


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


_SPEC_TOP_LEVEL_OPTIONALS = ("image", "serviceAccountName", "imagePullSecrets", "env", "podMetadata", "runtime",
                             "pods", "network")
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
    f"({has_role('actor', 'self.placement')} ? "
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
                f"self.reward.type != 'length' || !{has_role('reward', 'self.placement')}",
                "a length reward runs on CPU; remove placement.roles.reward or use reward.type=model",
            ),
            cel(
                f"self.reward.type != 'function' || !{has_role('reward', 'self.placement')}",
                "a function reward runs on CPU; remove placement.roles.reward or use reward.type=model",
            ),
            cel(
                f"!{has_role('rollout', 'self.placement')} || "
                "self.placement.roles.rollout.gpus % self.rollout.tensorParallelSize == 0",
                "placement.roles.rollout.gpus must be a multiple of rollout.tensorParallelSize (each "
                "vLLM engine "
                "takes tensorParallelSize GPUs of one pod); change either",
            ),
            cel(
                "self.placement.mode != 'colocated' || "
                f"({has_role('actor', 'self.placement')} ? self.placement.roles.actor.gpus : "
                f"self.placement.gpusPerNode)"
                " % self.rollout.tensorParallelSize == 0",
                "in colocated mode vLLM runs on the actor's GPUs: placement.roles.actor.gpus (default "
                "placement.gpusPerNode) must be a multiple of rollout.tensorParallelSize; change either",
            ),
            cel(
                f"self.placement.mode != 'disaggregated' || self.reward.type != 'model' || "
                f"{has_role('reward', 'self.placement')}",
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
                f"!has(self.algorithm.microBatchSizePerGPU) || ({_UPDATE_SEQUENCES_CEL}) % {ACTOR_GPUS_CEL} != 0 || "
                f"(({_UPDATE_SEQUENCES_CEL}) / {ACTOR_GPUS_CEL}) % self.algorithm.microBatchSizePerGPU == 0",
                SPEC_RULE_MESSAGES["micro"],
            ),
            cel("self.algorithm.groupSize < 2 || self.rollout.temperature > 0.0", SPEC_RULE_MESSAGES["temperature"]),
            cel("!has(self.rollout.gpuMemoryUtilization) || self.rollout.gpuMemoryUtilization < 1.0",
                SPEC_RULE_MESSAGES["gpu_memory"]),
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

    runtime: Name | None = Field(
        default=None,
        description="The GRPORuntime whose defaults this job takes (docs/runtimes.md); when empty, the runtime "
        "marked default, if any. The job's own fields win over the runtime's. The job keeps the runtime as it was "
        "when the job was created (status.runtime).",
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
    pods: PodOverrides | None = Field(
        default=None,
        description="Per-role pod overrides (extended resources such as RDMA devices, env, volumes, labels, "
        "annotations, tolerations, node affinity, hostNetwork, capabilities): a bounded subset of a pod "
        "template, merged into what the operator renders.",
    )
    network: NetworkSpec | None = Field(
        default=None,
        description="How NCCL talks across nodes: tcp, rdma or efa, rendered on every GPU role "
        "(docs/multi-node.md). Empty: nothing rendered, NCCL chooses on the pod network.",
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
