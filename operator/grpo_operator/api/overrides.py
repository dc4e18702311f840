"""Per-role pod overrides and multi-node networking: what a job or a GRPORuntime adds to the pods it gets.

A bounded, typed subset of a pod template, not a free-form one: every field here is something the operator
knows how to merge with what it renders itself (its container, command, mounts, GPU counts, security context),
and CEL refuses at `kubectl apply` what would break the job, naming the field and the fix.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from grpo_operator.api.base import (
    LABEL_VALUE_MAX,
    NAME_MAX,
    PATH_MAX,
    ApiModel,
    LabelMap,
    Name,
    Quantity,
    cel,
    validations,
)
from grpo_operator.api.placement import Toleration
from grpo_operator.api.pods import EnvVar

# Paths and volume names the operator mounts itself (docs/config-contract.md, "Mount points"; render/common.py's
# Volumes): an override may not shadow them. /dev/shm is ours too: its size is the `shmSize` field.
RESERVED_MOUNT_PATHS = ("/checkpoints", "/models", "/reward-models", "/data", "/resume-from", "/etc/grpo",
                        "/export", "/dev/shm")
RESERVED_VOLUME_NAMES = ("config", "models", "reward-models", "data", "checkpoints", "resume-from",
                         "reward-function", "dshm", "export-target")
# Resources a role already asks for through its own fields.
OWN_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage")
ROLES_WITH_PODS = ("actor", "rollout", "reward", "head", "preflight", "converter")


DnsLabel = Annotated[str, Field(min_length=1, max_length=LABEL_VALUE_MAX, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


class EmptyDirSource(ApiModel):
    """A scratch directory of the pod (core/v1 EmptyDirVolumeSource)."""

    medium: Literal["", "Memory"] | None = Field(default=None, description="Memory for a tmpfs; empty for disk.")
    size_limit: Quantity | None = Field(default=None, description="Most the volume may hold, e.g. 64Gi.")


class HostPathSource(ApiModel):
    """A directory or file of the node (core/v1 HostPathVolumeSource), e.g. a local model cache. Refused by the
    baseline and restricted Pod Security Standards."""

    path: Annotated[str, Field(min_length=1, max_length=PATH_MAX, pattern=r"^/")] = Field(
        description="Absolute path on the node."
    )
    type: Literal["", "Directory", "DirectoryOrCreate", "File", "FileOrCreate"] | None = Field(
        default=None, description="What must be at the path (Kubernetes' hostPath type)."
    )


class ClaimSource(ApiModel):
    claim_name: Name = Field(description="A PersistentVolumeClaim of the job's namespace.")


class ConfigMapSource(ApiModel):
    name: Name = Field(description="A ConfigMap of the job's namespace.")


class SecretSource(ApiModel):
    secret_name: Name = Field(description="A Secret of the job's namespace.")


class ExtraVolume(ApiModel):
    """A volume and its mount in the role's container, in one entry."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "[has(self.emptyDir), has(self.hostPath), has(self.persistentVolumeClaim), has(self.configMap), "
                "has(self.secret)].filter(x, x).size() == 1",
                "each volume takes exactly one of emptyDir, hostPath, persistentVolumeClaim, configMap or secret",
            ),
            cel(
                f"!({_cel_list(RESERVED_MOUNT_PATHS)}.exists(p, self.mountPath == p || "
                "self.mountPath.startsWith(p + '/')))",
                "mountPath is one of the operator's own mount points (/checkpoints, /models, /reward-models, "
                "/data, /resume-from, /etc/grpo, /export, /dev/shm); mount the volume elsewhere (for /dev/shm set "
                "shmSize)",
            ),
            cel(
                # The container runtime cleans a path before it mounts it: /./checkpoints would hide ours.
                "!self.mountPath.contains('//') && !self.mountPath.contains('/./') && "
                "!self.mountPath.contains('/../') && !self.mountPath.endsWith('/') && "
                "!self.mountPath.endsWith('/.') && !self.mountPath.endsWith('/..')",
                "mountPath must be a clean absolute path: no //, /./ or /../ and no trailing /, /. or /..",
            ),
            cel(
                f"!({_cel_list(RESERVED_VOLUME_NAMES)}.exists(n, self.name == n))",
                "the volume name is one the operator uses; pick another name",
            ),
        )
    )

    name: DnsLabel = Field(description="Volume name (a DNS label), unique in the pod.")
    mount_path: Annotated[str, Field(min_length=2, max_length=PATH_MAX, pattern=r"^/")] = Field(
        description="Where the container sees it."
    )
    read_only: bool | None = Field(default=None, description="Mount read-only.")
    empty_dir: EmptyDirSource | None = Field(default=None, description="A scratch directory.")
    host_path: HostPathSource | None = Field(default=None, description="A path of the node.")
    persistent_volume_claim: ClaimSource | None = Field(default=None, description="A claim of the namespace.")
    config_map: ConfigMapSource | None = Field(default=None, description="A ConfigMap's keys as files.")
    secret: SecretSource | None = Field(default=None, description="A Secret's keys as files.")


class NodeSelectorRequirement(ApiModel):
    """One required node-affinity expression (core/v1 NodeSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(self.operator in ['In', 'NotIn']) || (has(self.values) && self.values.size() > 0)",
                "nodeAffinity: In and NotIn need at least one value in values",
            ),
            cel(
                "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || self.values.size() == 0",
                "nodeAffinity: Exists and DoesNotExist take no values; remove values",
            ),
            cel(
                "!(self.operator in ['Gt', 'Lt']) || (has(self.values) && self.values.size() == 1 && "
                "self.values[0].matches('^-?[0-9]+$'))",
                "nodeAffinity: Gt and Lt need exactly one integer in values",
            ),
        )
    )

    key: Annotated[str, Field(min_length=1, max_length=NAME_MAX)] = Field(description="Node label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="How to compare.")
    values: list[Annotated[str, Field(max_length=LABEL_VALUE_MAX)]] | None = Field(
        default=None, max_length=32, description="Values for In, NotIn (any of), Gt and Lt (one integer)."
    )


Capability = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Z][A-Z_]*$")]
ResourceName = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]
# A device plugin's resource: never one of the amounts the operator sets itself.
DeviceResourceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=NAME_MAX,
        json_schema_extra=validations(
            cel(f"!(self in {_cel_list(OWN_RESOURCES)})",
                "resourceName must be the device plugin's resource, not cpu, memory, ephemeral-storage or "
                "nvidia.com/gpu (the operator sets those)")
        ),
    ),
]


class PodOverride(ApiModel):
    """What one role's pods get beyond what the operator renders. Merged into our pod and container: lists by
    key (env by name, volumes by name, tolerations appended), maps by key; the operator's own fields win."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                f"!has(self.resources) || !self.resources.exists(r, r in {_cel_list(OWN_RESOURCES)})",
                "pods.<role>.resources holds extra resources (RDMA devices, hugepages); CPU, memory and GPUs "
                "come from placement.roles.<role> (gpus, resources) and placement.head.resources",
            ),
            cel(
                "!has(self.volumes) || self.volumes.all(v, self.volumes.filter(w, w.name == v.name || "
                "w.mountPath == v.mountPath).size() == 1)",
                "pods.<role>.volumes: each name and each mountPath may appear once",
            ),
            cel(
                "!has(self.env) || !self.env.exists(e, e.name.startsWith('GRPO_') || e.name.startsWith('RAY_'))",
                "pods.<role>.env may not set GRPO_* or RAY_* variables: the operator and KubeRay set those "
                "(spec.env reaches every trainer container, GRPO_GUARDRAILS included)",
            ),
        )
    )

    resources: Annotated[dict[ResourceName, Quantity], Field(max_length=16)] | None = Field(
        default=None,
        description="Extended resources each pod asks for (requests = limits), e.g. {rdma/ib: 1} or "
        "{vpc.amazonaws.com/efa: 32}. The capacity check counts them against the nodes' allocatable.",
    )
    env: list[EnvVar] | None = Field(
        default=None, max_length=64, description="Environment of the role's container, after spec.env (wins by name)."
    )
    volumes: list[ExtraVolume] | None = Field(
        default=None, max_length=16, description="Volumes mounted in the role's container."
    )
    shm_size: Quantity | None = Field(
        default=None,
        description="Size limit of /dev/shm (a memory-backed emptyDir the operator always mounts; no limit when "
        "empty). Counted against the pod's memory limit by the kubelet.",
    )
    labels: LabelMap | None = Field(default=None, description="Pod labels (the operator's own labels win).")
    annotations: LabelMap | None = Field(
        default=None, description="Pod annotations, e.g. k8s.v1.cni.cncf.io/networks for Multus."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=16, description="Taints the role's pods tolerate, added to placement's."
    )
    node_affinity: list[NodeSelectorRequirement] | None = Field(
        default=None,
        max_length=16,
        description="Required node-affinity expressions, all of which a node must meet (added to every term the "
        "operator renders, e.g. the GPU driver floor). The capacity check applies them.",
    )
    host_network: bool | None = Field(
        default=None,
        description="Run in the node's network namespace (dnsPolicy ClusterFirstWithHostNet). Refused where the "
        "namespace enforces the baseline or restricted Pod Security Standard.",
    )
    capabilities: list[Capability] | None = Field(
        default=None,
        max_length=8,
        description="Linux capabilities added to the container (all others stay dropped). The trainer runs as uid "
        "1000, and a non-root process gets no ambient capabilities from the container runtime: a capability "
        "reaches only a binary of your image that carries it as a file capability (setcap), so asking for one "
        "also allows privilege escalation, which the restricted Pod Security Standard refuses (baseline admits "
        "the runtime's default set, privileged the rest).",
    )


class PodOverrides(ApiModel):
    """Pod overrides by role. Head, preflight and converter have no GPUs; the preflight and the converter get
    only env, volumes, labels, annotations, tolerations and nodeAffinity (they run no NCCL)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            *[
                cel(
                    f"!has(self.{role}) || (!has(self.{role}.resources) && !has(self.{role}.hostNetwork) && "
                    f"!has(self.{role}.capabilities) && !has(self.{role}.shmSize))",
                    f"pods.{role} takes env, volumes, labels, annotations, tolerations and nodeAffinity only: the "
                    f"{role} pod runs no NCCL; move resources, hostNetwork, capabilities and shmSize to the GPU "
                    f"roles",
                )
                for role in ("preflight", "converter")
            ]
        )
    )

    actor: PodOverride | None = Field(default=None, description="The actor's pods.")
    rollout: PodOverride | None = Field(default=None, description="The rollout's pods (disaggregated mode).")
    reward: PodOverride | None = Field(default=None, description="The reward model's pods.")
    head: PodOverride | None = Field(default=None, description="The Ray head pod.")
    preflight: PodOverride | None = Field(default=None, description="The preflight Job's pod.")
    converter: PodOverride | None = Field(default=None, description="The converter Job's pod.")


class RdmaNetwork(ApiModel):
    """InfiniBand or RoCE through an RDMA device plugin (and usually Multus for the secondary interfaces)."""

    resource_name: DeviceResourceName = Field(
        default="rdma/ib",
        description="The extended resource the RDMA device plugin advertises, e.g. rdma/ib, "
        "rdma/rdma_shared_device_a or nvidia.com/hostdev.",
    )
    devices_per_pod: int = Field(default=1, ge=1, le=64, description="How many of them each GPU pod asks for.")
    hcas: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=32,
        description="NCCL_IB_HCA: the HCAs NCCL may use (e.g. [mlx5_0, mlx5_1], or [mlx5] for every mlx5 "
        "device); empty lets NCCL choose.",
    )
    gid_index: int | None = Field(
        default=None, ge=0, le=255, description="NCCL_IB_GID_INDEX; 3 is RoCE v2 over IPv4 on most NICs."
    )
    networks: list[Name] | None = Field(
        default=None,
        max_length=16,
        description="Multus NetworkAttachmentDefinitions for the pods' secondary interfaces "
        "(k8s.v1.cni.cncf.io/networks).",
    )


class EfaNetwork(ApiModel):
    """AWS Elastic Fabric Adapter through the EFA device plugin; the image needs libfabric and aws-ofi-nccl."""

    resource_name: DeviceResourceName = Field(
        default="vpc.amazonaws.com/efa", description="The extended resource the EFA device plugin advertises."
    )
    devices_per_pod: int = Field(
        ge=1, le=64, description="EFA devices per GPU pod: every one of the node's (p5/p5e/p5en: 32, p4d: 4)."
    )


class NetworkSpec(ApiModel):
    """How NCCL and vLLM's weight sync talk across nodes; rendered on every GPU role (actor, rollout, reward)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("!has(self.rdma) || self.mode == 'rdma'", "network.rdma is read only with network.mode: rdma"),
            cel("!has(self.efa) || self.mode == 'efa'", "network.efa is read only with network.mode: efa"),
            cel(
                "self.mode != 'efa' || has(self.efa)",
                "network.mode: efa needs network.efa.devicesPerPod (32 on p5/p5e/p5en, 4 on p4d)",
            ),
        )
    )

    mode: Literal["tcp", "rdma", "efa"] = Field(
        description="tcp: the pod network, NCCL's IB transport turned off (NCCL_IB_DISABLE=1; without a network "
        "section nothing is rendered and NCCL probes for itself). rdma: InfiniBand/RoCE devices and NCCL's IB "
        "transport. efa: AWS EFA devices and libfabric."
    )
    socket_interface: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None,
        description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: the interface NCCL's bootstrap and socket "
        "transport use (e.g. eth0, or ^lo,docker to exclude); empty lets NCCL choose.",
    )
    rdma: RdmaNetwork | None = Field(default=None, description="RDMA settings (mode rdma).")
    efa: EfaNetwork | None = Field(default=None, description="EFA settings (mode efa).")
