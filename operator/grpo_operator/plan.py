"""plan(spec): the pure decisions between a GRPOJob spec and its children.

Roles become worker groups (GPUs, CPUs, memory, pinning, the Ray resource each advertises),
names and mount paths are fixed, and what the CRD's CEL rules cannot judge is refused here with a
``PlanError`` naming the field and the fix. Render functions only read a ``Plan``; they decide
nothing.

The CEL-enforced cross-field rules are checked again here: the operator must never build
children from a spec that bypassed them (an older CRD, a direct etcd write), and the handlers turn
a ``PlanError`` into an ``Invalid`` condition and an Event with the same message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from grpo_operator.api import (
    PERSISTENCE_DEFAULTS,
    SPEC_RULE_MESSAGES,
    GRPOJobSpec,
    PodOverride,
    RoleSpec,
    Toleration,
)
from grpo_operator.checkpoint_claim import READ_WRITE_MANY, READ_WRITE_ONCE_POD, new_claim_access_modes
from grpo_operator.network import NCCL_ROLES, network_override
from grpo_operator.node_rules import DEFAULT_DRIVER_FLOOR, driver_terms, with_gpu_toleration, with_required
from grpo_operator.runtimes import merge_pod_override, pods_of

Role = Literal["actor", "rollout", "reward"]
ROLES: tuple[Role, ...] = ("actor", "rollout", "reward")
RAY_RESOURCE_PREFIX = "grpo.dev/"

# verl places every GPU worker with {"CPU": 3, "GPU": 1}; one more CPU leaves room for the raylet
# and the worker's data loading without starving a bundle.
CPUS_PER_GPU = 3
DEFAULT_EXTRA_CPUS = 1
DEFAULT_MEMORY_GI_PER_GPU = 32
DEFAULT_EXTRA_MEMORY_GI = 8
HEAD_CPU = "8"
HEAD_MEMORY = "32Gi"
METRICS_PORT = 9400

# verl keys the operator derives from the spec and the pods it creates; an override in spec.verl
# would make verl disagree with the cluster (or the mounts), so it is refused.
OWNED_VERL_KEYS: dict[str, str] = {
    "trainer.n_gpus_per_node": "placement.roles.actor.gpus",
    "trainer.nnodes": "placement.roles.actor.replicas",
    "trainer.default_local_dir": "the checkpoint volume mount (/checkpoints)",
    "actor_rollout_ref.hybrid_engine": "placement.mode",
    "actor_rollout_ref.model.path": "model.path",
    "actor_rollout_ref.rollout.n_gpus_per_node": "placement.roles.rollout.gpus",
    "actor_rollout_ref.rollout.nnodes": "placement.roles.rollout.replicas",
    "reward.reward_model.enable_resource_pool": "placement.roles.reward",
    "reward.reward_model.n_gpus_per_node": "placement.roles.reward.gpus",
    "reward.reward_model.nnodes": "placement.roles.reward.replicas",
    "data.train_files": "data.trainFiles (the trainer converts them and sets this key)",
    "data.val_files": "data.valFiles (the trainer converts them and sets this key)",
}

# verl keys a GRPOJob field sets and the admission rules judge (batch divisibility, sampling): an
# override in spec.verl would slip past those rules, so it is refused in favour of the field.
TYPED_VERL_KEYS: dict[str, str] = {
    "data.train_batch_size": "data.trainBatchSize",
    "actor_rollout_ref.rollout.n": "algorithm.groupSize",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "algorithm.miniBatchSize",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "algorithm.microBatchSizePerGPU",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "rollout.gpuMemoryUtilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout.tensorParallelSize",
}


class PlanError(ValueError):
    """A spec the operator cannot turn into children. ``field`` is relative to ``spec``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"spec.{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Mounts:
    """Where things are inside the trainer pods (docs/config-contract.md)."""

    config_dir: str = "/etc/grpo"
    config_file: str = "/etc/grpo/verl.yaml"
    config_key: str = "verl.yaml"
    models: str = "/models"
    reward_models: str = "/reward-models"
    data: str = "/data"
    checkpoints: str = "/checkpoints"
    reward_function_dir: str = "/etc/grpo/reward"
    export: str = "/export"
    resume_from: str = "/resume-from"


MOUNTS = Mounts()


@dataclass(frozen=True)
class Names:
    """Names of the children of one GRPOJob."""

    job: str
    namespace: str

    @property
    def rayjob(self) -> str:
        return self.job

    @property
    def configmap(self) -> str:
        return f"{self.job}-verl"

    @property
    def checkpoint_pvc(self) -> str:
        return f"{self.job}-checkpoints"

    @property
    def export_job(self) -> str:
        return f"{self.job}-export"

    @property
    def preflight_job(self) -> str:
        return f"{self.job}-preflight"

    @property
    def trainer_service_account(self) -> str:
        return f"{self.job}-trainer"

    @property
    def trainer_role(self) -> str:
        return f"{self.job}-trainer"

    @property
    def network_policy(self) -> str:
        return self.job


@dataclass(frozen=True)
class PodShape:
    """CPU/memory (requests = limits), pinning, as the pod template wants them."""

    cpu: str
    memory: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    # Required node affinity (nodeSelectorTerms, ORed): a GPU pod's driver floor (node_rules.py).
    node_terms: tuple[Mapping[str, Any], ...] = ()
    # spec.pods.<role> with what spec.network adds (its tolerations and nodeAffinity are in the two fields above).
    override: PodOverride | None = None

    @property
    def extra_resources(self) -> Mapping[str, int | str]:
        return dict(self.override.resources or {}) if self.override is not None else {}


@dataclass(frozen=True)
class WorkerGroup:
    """One Ray worker group: ``replicas`` pods of ``gpus`` GPUs, advertising ``ray_resource``."""

    role: Role
    gpus: int
    replicas: int
    pod: PodShape

    @property
    def name(self) -> str:
        return self.role

    @property
    def ray_resource(self) -> str:
        return RAY_RESOURCE_PREFIX + self.role

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.replicas

    @property
    def verl_n_gpus_per_node(self) -> int:
        # verl's resource pools are [n_gpus_per_node] * nnodes; one pod is one "node" to Ray.
        return self.gpus

    @property
    def verl_nnodes(self) -> int:
        return self.replicas


@dataclass(frozen=True)
class ResumeSource:
    """Where a warm start reads its checkpoint: a directory of a claim, mounted read-only."""

    claim: str
    sub_path: str
    step: int | None


@dataclass(frozen=True)
class Plan:
    """Everything the render functions need, decided once."""

    names: Names
    image: str
    mode: Literal["colocated", "disaggregated"]
    head: PodShape
    # The converter pod: spec.export's own placement and resources where given, else the head's.
    export_pod: PodShape
    groups: tuple[WorkerGroup, ...]
    service_account: str
    creates_service_account: bool
    checkpoint_claim: str
    creates_checkpoint_pvc: bool
    model_path: str
    reward_model_path: str | None
    reward_model_claim: str | None  # set only when it differs from the policy model's claim
    reward_function_path: str | None
    # Checkpoint storage (the "checkpoints" section below): the job's own directory of the claim, the
    # access modes of a PVC the operator creates, and whether the writers (head and actor) share a node.
    checkpoint_sub_path: str = ""
    checkpoint_access_modes: tuple[str, ...] = ()
    # The size of a new checkpoint PVC: spec.checkpoints.volume.size, else what the preflight chose for the model
    # (with_checkpoint_size), else DEFAULT_CHECKPOINT_SIZE.
    checkpoint_size: str | None = None
    writers_share_node: bool = False
    resume_from: ResumeSource | None = None
    export_enabled: bool = False
    # spec.rehearsal: the RayJob rehearses instead of training, and nothing is exported after it.
    rehearsal: bool = False
    # RayJob backoffLimit: spec.scheduling.retries, none for a rehearsal (its verdict is a check of the spec
    # and the cluster, the same on every attempt; a retry would only run it again and say "resumes").
    retries: int = 0
    mounts: Mounts = MOUNTS
    # The preflight pod: the head's placement (no GPU) with spec.pods.preflight; None: the head's shape.
    preflight_pod: PodShape | None = None

    @property
    def exports(self) -> bool:
        """Whether the converter runs after the RayJob completes."""
        return self.export_enabled and not self.rehearsal

    @property
    def total_gpus(self) -> int:
        return sum(g.total_gpus for g in self.groups)

    def group(self, role: Role) -> WorkerGroup | None:
        return next((g for g in self.groups if g.role == role), None)

    @property
    def actor(self) -> WorkerGroup:
        actor = self.group("actor")
        assert actor is not None, "plan() always makes an actor group"
        return actor


# --------------------------------------------------------------------------- quantities

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)}
_DECIMAL |= {"k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12)}
_DECIMAL |= {"P": Decimal(10**15), "E": Decimal(10**18)}


def parse_quantity(value: int | str) -> Decimal:
    """A Kubernetes resource.Quantity as a number (CPU in cores, memory in bytes)."""
    if isinstance(value, int):
        return Decimal(value)
    text = value.strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * factor
    if text and text[-1] in _DECIMAL and not text[-1].isdigit():
        return Decimal(text[:-1]) * _DECIMAL[text[-1]]
    return Decimal(text)  # plain number or exponent form (1e3)


# --------------------------------------------------------------------------- roles


def _tolerations(items: list[Toleration]) -> tuple[Mapping[str, Any], ...]:
    return tuple(t.model_dump(by_alias=True, exclude_none=True) for t in items)


def _pod_shape(field: str, role: RoleSpec) -> PodShape:
    min_cpu = CPUS_PER_GPU * role.gpus
    cpu = role.resources.cpu
    if cpu is None:
        cpu_text = str(min_cpu + DEFAULT_EXTRA_CPUS)
    else:
        try:
            cores = parse_quantity(cpu)
        except (InvalidOperation, ValueError) as e:
            raise PlanError(f"{field}.resources.cpu", f"{cpu!r} is not a CPU quantity; write e.g. 16 or 16000m") from e
        if cores < min_cpu:
            raise PlanError(
                f"{field}.resources.cpu",
                f"{cpu} CPUs cannot feed {role.gpus} GPUs: verl asks Ray for {CPUS_PER_GPU} CPUs with every GPU; "
                f"set it to at least {min_cpu} or remove it (default {min_cpu + DEFAULT_EXTRA_CPUS})",
            )
        cpu_text = str(cpu)
    memory = role.resources.memory
    if memory is None:
        memory_text = f"{DEFAULT_MEMORY_GI_PER_GPU * role.gpus + DEFAULT_EXTRA_MEMORY_GI}Gi"
    else:
        try:
            amount = parse_quantity(memory)
        except (InvalidOperation, ValueError):
            amount = Decimal(0)
        if amount <= 0:
            raise PlanError(
                f"{field}.resources.memory", f"{memory!r} is not a positive memory quantity; write e.g. 256Gi"
            )
        memory_text = str(memory)
    return PodShape(
        cpu=cpu_text,
        memory=memory_text,
        node_selector=dict(role.node_selector),
        tolerations=_tolerations(role.tolerations),
    )


def role_override(spec: GRPOJobSpec, role: str) -> PodOverride | None:
    """What the role's pods get beyond what the operator renders: spec.pods.<role> over spec.network's additions
    (an NCCL role's only). A variable the job sets in spec.env is the job's, not the network's default."""
    try:
        network = network_override(spec.network) if role in NCCL_ROLES else None
    except ValueError as exc:
        raise PlanError("network.efa", str(exc)) from exc
    own = {e.name for e in spec.env or ()}
    if network is not None and network.env and own:
        network = network.model_copy(update={"env": [e for e in network.env if e.name not in own]})
    override = merge_pod_override(network, getattr(spec.pods, role) if spec.pods is not None else None)
    _check_volumes(role, override)
    return override


def _check_volumes(role: str, override: PodOverride | None) -> None:
    """The merged volumes (a runtime's and the job's) mount each path once: two mounts at one path make the
    apiserver refuse every pod of the role, long after the job was accepted."""
    seen: dict[str, str] = {}
    for volume in (override.volumes or ()) if override is not None else ():
        if volume.mount_path in seen:
            raise PlanError(f"pods.{role}.volumes", f"{seen[volume.mount_path]} and {volume.name} both mount "
                            f"{volume.mount_path} (with the job's GRPORuntime's volumes); mount one elsewhere")
        seen[volume.mount_path] = volume.name


def _check_host_network(spec: GRPOJobSpec) -> None:
    """All of the job's Ray pods on the host's network, or none: the job's NetworkPolicy admits its pods by pod
    selector, which a host-network pod's traffic (from the node's address) never matches, so a mix cannot form the
    Ray cluster."""
    pods = spec.pods
    if pods is None:
        return
    created = pods_of(spec)
    roles = [r for r in ("head", "actor", "rollout", "reward") if r in created]
    on_host = [r for r in roles if (getattr(pods, r) or PodOverride()).host_network]
    if on_host and len(on_host) != len(roles):
        off = [r for r in roles if r not in on_host]
        raise PlanError("pods", f"hostNetwork is set for {', '.join(on_host)} but not for {', '.join(off)}: the "
                        "job's Ray pods must all be on the host's network or none (the job's NetworkPolicy cannot "
                        "admit a host-network pod by its labels); set pods.<role>.hostNetwork on every one of them")


def with_override(pod: PodShape, override: PodOverride | None) -> PodShape:
    """`pod` with an override: its tolerations added, its node affinity demanded on top of the pod's own."""
    if override is None:
        return pod
    tolerations = list(pod.tolerations)
    tolerations += [t for t in _tolerations(override.tolerations or []) if t not in tolerations]
    expressions = [e.model_dump(by_alias=True, exclude_none=True) for e in override.node_affinity or ()]
    return replace(pod, tolerations=tuple(tolerations), node_terms=with_required(pod.node_terms, expressions),
                   override=override)


def _worker_group(role: Role, spec: RoleSpec, driver_floor: int, override: PodOverride | None) -> WorkerGroup:
    pod = _pod_shape(f"placement.roles.{role}", spec)
    if spec.gpus:  # GPU nodes are tainted and may run an old driver: node_rules.py
        pod = replace(pod, tolerations=with_gpu_toleration(pod.tolerations),
                      node_terms=driver_terms(driver_floor) if driver_floor else ())
    return WorkerGroup(role=role, gpus=spec.gpus, replicas=spec.replicas, pod=with_override(pod, override))


def _head_shape(spec: GRPOJobSpec) -> PodShape:
    return with_override(_head_base_shape(spec), role_override(spec, "head"))


def _preflight_shape(spec: GRPOJobSpec) -> PodShape:
    """Where the head would run (CPU, placement.head), with spec.pods.preflight."""
    return with_override(_head_base_shape(spec), role_override(spec, "preflight"))


def _head_base_shape(spec: GRPOJobSpec) -> PodShape:
    head = spec.placement.head
    return PodShape(
        cpu=str(head.resources.cpu) if head.resources.cpu is not None else HEAD_CPU,
        memory=str(head.resources.memory) if head.resources.memory is not None else HEAD_MEMORY,
        node_selector=dict(head.node_selector),
        tolerations=_tolerations(head.tolerations),
    )


def _export_shape(spec: GRPOJobSpec) -> PodShape:
    head, export = _head_base_shape(spec), spec.export
    resources = export.resources
    return with_override(PodShape(
        cpu=str(resources.cpu) if resources and resources.cpu is not None else head.cpu,
        memory=str(resources.memory) if resources and resources.memory is not None else head.memory,
        node_selector=dict(export.node_selector) if export.node_selector is not None else head.node_selector,
        tolerations=_tolerations(export.tolerations) if export.tolerations is not None else head.tolerations,
    ), role_override(spec, "converter"))


def _check_roles(spec: GRPOJobSpec) -> None:
    """The cross-field rules the CRD also enforces, judged again (see the module docstring)."""
    placement = spec.placement
    roles = placement.roles
    tp = spec.rollout.tensor_parallel_size
    if roles.reward is not None and spec.reward.type != "model":
        raise PlanError(
            "placement.roles.reward",
            f"a {spec.reward.type} reward runs on CPU; remove placement.roles.reward or use reward.type=model",
        )
    for role in ROLES:
        group = getattr(roles, role)
        if group is not None and group.gpus > placement.gpus_per_node:
            raise PlanError(
                f"placement.roles.{role}.gpus",
                f"{group.gpus} GPUs do not fit a {placement.gpus_per_node}-GPU node (placement.gpusPerNode); "
                f"lower gpus and raise placement.roles.{role}.replicas instead",
            )
    if placement.mode == "disaggregated":
        if roles.actor is None or roles.rollout is None:
            raise PlanError(
                "placement.roles",
                "placement.mode=disaggregated needs placement.roles.actor and placement.roles.rollout; add both or "
                "use placement.mode=colocated",
            )
        if spec.reward.type == "model" and roles.reward is None:
            raise PlanError(
                "placement.roles.reward",
                "placement.mode=disaggregated with reward.type=model needs placement.roles.reward: verl's "
                "separate-async trainer cannot share the actor's GPUs with a reward model; add "
                "placement.roles.reward or use placement.mode=colocated",
            )
        mini = spec.algorithm.mini_batch_size
        if mini is not None and spec.data.train_batch_size % mini:
            raise PlanError(
                "algorithm.miniBatchSize",
                f"placement.mode=disaggregated syncs weights every data.trainBatchSize / algorithm.miniBatchSize "
                f"updates, and {spec.data.train_batch_size} is not a multiple of {mini}; change either or remove "
                "algorithm.miniBatchSize",
            )
        if roles.rollout.gpus % tp:
            raise PlanError(
                "placement.roles.rollout.gpus",
                f"{roles.rollout.gpus} GPUs is not a multiple of rollout.tensorParallelSize={tp}; change either",
            )
    else:
        if roles.rollout is not None:
            raise PlanError(
                "placement.roles.rollout",
                "placement.mode=colocated runs vLLM on the actor's GPUs; remove placement.roles.rollout or use "
                "placement.mode=disaggregated",
            )
        actor_gpus = roles.actor.gpus if roles.actor is not None else placement.gpus_per_node
        if actor_gpus % tp:
            raise PlanError(
                "rollout.tensorParallelSize",
                f"in colocated mode vLLM runs on the actor's {actor_gpus} GPUs per pod, which is not a multiple of "
                f"rollout.tensorParallelSize={tp}; change either",
            )
    if spec.reward.type == "function" and spec.reward.function is None:
        raise PlanError("reward.function", "reward.type=function needs reward.function {configMapName, key, name}")
    if spec.reward.type == "model" and spec.reward.model is None:
        raise PlanError("reward.model", "reward.type=model needs reward.model {claimName, path}")


def actor_gpus(spec: GRPOJobSpec) -> int:
    """The actor's FSDP world size: every actor GPU is one data-parallel rank in verl."""
    actor = spec.placement.roles.actor
    return actor.gpus * actor.replicas if actor is not None else spec.placement.gpus_per_node


def _check_batches(spec: GRPOJobSpec) -> None:
    """How verl 0.9.1 splits a step's sequences (the CRD's rules, judged again with the numbers).

    validate_config: train_batch_size x rollout.n divisible by the actor's GPUs; engine_workers
    train_mini_batch: ppo_mini_batch_size x n divisible by the data-parallel size; engine utils
    prepare_micro_batches: that per-GPU share divisible by ppo_micro_batch_size_per_gpu.
    """
    gpus = actor_gpus(spec)
    n = spec.algorithm.group_size
    step = spec.data.train_batch_size * n
    if step % gpus:
        raise PlanError(
            "data.trainBatchSize",
            f"{spec.data.train_batch_size} x groupSize {n} = {step} sequences do not split over {gpus} actor GPUs; "
            + SPEC_RULE_MESSAGES["step"],
        )
    mini = spec.algorithm.mini_batch_size or spec.data.train_batch_size
    update = mini * n
    if update % gpus:
        raise PlanError(
            "algorithm.miniBatchSize",
            f"{mini} x groupSize {n} = {update} sequences per update do not split over {gpus} actor GPUs; "
            + SPEC_RULE_MESSAGES["update"],
        )
    micro = spec.algorithm.micro_batch_size_per_gpu
    per_gpu = update // gpus
    if micro is not None and per_gpu % micro:  # empty: sized to a divisor (render/verl_config.py)
        raise PlanError(
            "algorithm.microBatchSizePerGPU",
            f"{micro} does not divide the {per_gpu} sequences each actor GPU gets per update; "
            + SPEC_RULE_MESSAGES["micro"],
        )


def _check_guardrails(spec: GRPOJobSpec) -> None:
    guardrails = spec.guardrails
    if guardrails.rollback.change == "klCoef" and not spec.algorithm.kl_loss.enabled:
        raise PlanError("guardrails.rollback.change", SPEC_RULE_MESSAGES["kl_rollback"])
    detectors = {name: getattr(guardrails.detectors, name) for name in type(guardrails.detectors).model_fields}
    for name, detector in detectors.items():
        if not hasattr(detector, "k"):
            continue
        field = to_camel(name)
        k_default, m_default = PERSISTENCE_DEFAULTS.get(field, PERSISTENCE_DEFAULTS["other"])
        k, m = detector.k or k_default, detector.m or m_default
        if k > m:
            raise PlanError(f"guardrails.detectors.{field}.k",
                            f"k {k} exceeds m {m} (defaults k={k_default}, m={m_default}): k of the last m steps out "
                            "of bounds trips the detector; lower k or raise m")
    acts = any((d.mode or guardrails.mode) == "act" for d in detectors.values())  # as the CRD's rule judges it
    if acts and spec.checkpoints.resume != "auto":
        raise PlanError("guardrails.mode", SPEC_RULE_MESSAGES["act_resume"])


def _check_sampling(spec: GRPOJobSpec) -> None:
    if spec.algorithm.group_size > 1 and spec.rollout.temperature <= 0:
        raise PlanError("rollout.temperature", SPEC_RULE_MESSAGES["temperature"])
    if (spec.rollout.gpu_memory_utilization or 0) >= 1:
        raise PlanError(
            "rollout.gpuMemoryUtilization",
            f"{spec.rollout.gpu_memory_utilization} in {spec.placement.mode} mode; " + SPEC_RULE_MESSAGES["gpu_memory"],
        )


def _positive(field: str, value: int | str | None, example: str) -> None:
    """A quantity the apiserver would refuse as zero only when the child is created (a 422 on every retry)."""
    if value is None:
        return
    try:
        amount = parse_quantity(value)
    except (InvalidOperation, ValueError):
        amount = Decimal(0)
    if amount <= 0:
        raise PlanError(field, f"{value!r} is not a positive quantity; write e.g. {example}")


def _check_quantities(spec: GRPOJobSpec) -> None:
    _positive("checkpoints.volume.size", spec.checkpoints.volume.size, "500Gi")
    _positive("preflight.resources.cpu", spec.preflight.resources.cpu, "2")
    _positive("preflight.resources.memory", spec.preflight.resources.memory, "8Gi")
    _positive("placement.gpuMemory", spec.placement.gpu_memory, "80Gi")


def _groups(spec: GRPOJobSpec, driver_floor: int = DEFAULT_DRIVER_FLOOR) -> tuple[WorkerGroup, ...]:
    roles = spec.placement.roles
    actor = roles.actor or RoleSpec(gpus=spec.placement.gpus_per_node)
    groups = [_worker_group("actor", actor, driver_floor, role_override(spec, "actor"))]
    if spec.placement.mode == "disaggregated" and roles.rollout is not None:
        groups.append(_worker_group("rollout", roles.rollout, driver_floor, role_override(spec, "rollout")))
    if roles.reward is not None:
        groups.append(_worker_group("reward", roles.reward, driver_floor, role_override(spec, "reward")))
    return tuple(groups)


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    """Nested mappings as dotted keys; an empty mapping stays a value (e.g. ``kwargs: {}``)."""
    if isinstance(value, Mapping) and (value or not prefix):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flatten(f"{prefix}.{key}" if prefix else str(key), inner)
        return out
    return {prefix: value}


def verl_overrides(spec: GRPOJobSpec) -> dict[str, Any]:
    """spec.verl as flat dotted keys (nested mappings are flattened), refusing operator-owned keys."""
    flat = _flatten("", spec.verl)
    for key in flat:
        if key == "grpo" or key.startswith("grpo."):
            raise PlanError(
                f"verl.{key}",
                "grpo.* settings come from the GRPOJob's own fields, not from spec.verl; remove the key",
            )
        owner = next((k for k in OWNED_VERL_KEYS if key == k or key.startswith(k + ".")), None)
        if owner is not None:
            raise PlanError(
                f"verl.{key}",
                f"the operator sets {owner} from {OWNED_VERL_KEYS[owner]}; remove it from spec.verl",
            )
        if key.lstrip("+") in TYPED_VERL_KEYS:
            field = TYPED_VERL_KEYS[key.lstrip("+")]
            raise PlanError(
                f"verl.{key}",
                f"set spec.{field} instead: it is checked against the layout when the job is applied, "
                "an override here would not be; remove the key from spec.verl",
            )
    return flat


def parse_spec(raw: Mapping[str, Any]) -> GRPOJobSpec:
    """A GRPOJob's ``spec`` (camelCase, as the apiserver returns it) as the pydantic model.

    The CRD schema normally guarantees this succeeds; when it does not (an older CRD, a spec
    written around the apiserver), the first problem becomes a ``PlanError`` naming the field.
    """
    try:
        return GRPOJobSpec.model_validate(dict(raw))
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "spec"
        raise PlanError(field, f"{first['msg']} ({len(e.errors())} problem(s) in total)") from e


# --------------------------------------------------------------------------- checkpoints

def checkpoint_sub_path(namespace: str, name: str) -> str:
    """A job's own directory of its checkpoint claim: jobs sharing a claim never see each other's steps."""
    return f"{namespace}/{name}"


def _writers_share_node(field: str, modes: Sequence[str], actor: WorkerGroup, claim: str) -> bool:
    """Whether the checkpoint writers (the head's driver and every actor pod) must share one node.

    Without ReadWriteMany the claim attaches to one node, so the head follows the actor pod there;
    more than one actor pod cannot share it, and ReadWriteOncePod admits only one pod of the writers.
    """
    if READ_WRITE_ONCE_POD in modes:
        raise PlanError(
            field,
            f"{claim} is ReadWriteOncePod, which lets one pod mount it, but the Ray head and every actor pod "
            "write checkpoints; use ReadWriteOnce (one actor pod) or ReadWriteMany",
        )
    if READ_WRITE_MANY in modes:
        return False
    if actor.replicas > 1:
        raise PlanError(
            field,
            f"{claim} is {'/'.join(modes) or 'not ReadWriteMany'}, so it attaches to one node, but the "
            f"{actor.replicas} actor pods (placement.roles.actor.replicas) each write checkpoints from their "
            "own node; use a ReadWriteMany claim (a shared filesystem such as EFS, Filestore, Azure Files or NFS) "
            "or one actor pod",
        )
    return True


def _checkpoint_storage(spec: GRPOJobSpec, actor: WorkerGroup, claim: str) -> tuple[tuple[str, ...], bool]:
    """(access modes of a new PVC, writers share a node); an existing claim is judged once read
    (`with_checkpoint_claim`)."""
    if spec.checkpoints.volume.claim_name is not None:
        return (), False
    modes = new_claim_access_modes(spec)
    return modes, _writers_share_node("checkpoints.volume.accessModes", modes, actor, f"the new PVC {claim}")


DEFAULT_CHECKPOINT_SIZE = "100Gi"


def with_checkpoint_size(job_plan: Plan, size: str | None) -> Plan:
    """The plan with the size the preflight chose for a new checkpoint claim whose spec names none."""
    return job_plan if size is None or job_plan.checkpoint_size is not None else replace(job_plan, checkpoint_size=size)


def with_checkpoint_claim(job_plan: Plan, access_modes: Sequence[str]) -> Plan:
    """The plan for an existing checkpoint claim (checkpoints.volume.claimName) with these access modes."""
    share = _writers_share_node(
        "checkpoints.volume.claimName",
        tuple(access_modes),
        job_plan.actor,
        f"PersistentVolumeClaim {job_plan.checkpoint_claim!r}",
    )
    return replace(job_plan, writers_share_node=share)


def _resume_source(spec: GRPOJobSpec, namespace: str, checkpoint_claim: str) -> ResumeSource | None:
    source = spec.checkpoints.resume_from
    if source is None:
        return None
    if source.job_name is not None:
        sub_path = checkpoint_sub_path(namespace, source.job_name)
    elif source.path is not None:
        sub_path = source.path.rstrip("/")
    else:  # the CRD requires one of them; a spec written around it is refused here
        raise PlanError("checkpoints.resumeFrom", "needs exactly one of jobName or path")
    if source.claim_name is None and spec.checkpoints.volume.claim_name is None:
        raise PlanError(
            "checkpoints.resumeFrom.claimName",
            f"this job's checkpoints go to a new, empty PVC ({checkpoint_claim}), which holds nothing to start "
            "from; name the claim that holds the checkpoint (a job's own PVC is <jobName>-checkpoints)",
        )
    return ResumeSource(claim=source.claim_name or checkpoint_claim, sub_path=sub_path, step=source.step)


def plan(spec: GRPOJobSpec, *, name: str, namespace: str, default_image: str | None = None,
         driver_floor: int = DEFAULT_DRIVER_FLOOR) -> Plan:
    """Decide worker groups, names, mounts and paths for the GRPOJob ``namespace/name``.

    ``driver_floor``: the NVIDIA driver major version GPU pods need (0: none; node_rules.py).

    Raises ``PlanError`` for a spec that cannot run; nothing should be created then.
    """
    _check_roles(spec)
    _check_batches(spec)
    _check_sampling(spec)
    _check_guardrails(spec)
    _check_quantities(spec)
    _check_host_network(spec)
    groups = _groups(spec, driver_floor)
    verl_overrides(spec)  # judged here so a bad override is an Invalid job, not a failed render

    image = spec.image or default_image
    if not image:
        raise PlanError("image", "no trainer image: set spec.image or the operator's default trainer image")

    names = Names(job=name, namespace=namespace)
    volume = spec.checkpoints.volume
    reward_model_path = reward_model_claim = reward_function_path = None
    if spec.reward.type == "model" and spec.reward.model is not None:
        same_claim = spec.reward.model.claim_name == spec.model.claim_name
        root = MOUNTS.models if same_claim else MOUNTS.reward_models
        reward_model_path = f"{root}/{spec.reward.model.path}"
        reward_model_claim = None if same_claim else spec.reward.model.claim_name
    if spec.reward.type == "function" and spec.reward.function is not None:
        reward_function_path = f"{MOUNTS.reward_function_dir}/{spec.reward.function.key}"

    checkpoint_claim = volume.claim_name or names.checkpoint_pvc
    access_modes, share_node = _checkpoint_storage(spec, groups[0], checkpoint_claim)  # groups[0] is the actor
    return Plan(
        names=names,
        image=image,
        mode=spec.placement.mode,
        head=_head_shape(spec),
        export_pod=_export_shape(spec),
        preflight_pod=_preflight_shape(spec),
        groups=groups,
        service_account=spec.service_account_name or names.trainer_service_account,
        creates_service_account=spec.service_account_name is None,
        checkpoint_claim=checkpoint_claim,
        creates_checkpoint_pvc=volume.claim_name is None,
        model_path=f"{MOUNTS.models}/{spec.model.path}",
        reward_model_path=reward_model_path,
        reward_model_claim=reward_model_claim,
        reward_function_path=reward_function_path,
        export_enabled=spec.export.enabled,
        rehearsal=spec.rehearsal,
        retries=0 if spec.rehearsal else spec.scheduling.retries,
        checkpoint_sub_path=checkpoint_sub_path(namespace, name),
        checkpoint_access_modes=access_modes,
        checkpoint_size=volume.size,
        writers_share_node=share_node,
        resume_from=_resume_source(spec, namespace, checkpoint_claim),
    )
