"""Where the job's pods run: the placement mode, the worker group of each role and the Ray head."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from grpo_operator.api.base import LABEL_VALUE_MAX, NAME_MAX, ApiModel, LabelMap, Quantity, cel, validations


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


def has_role(role: str, placement: str = "self") -> str:
    """CEL: the placement at ``placement`` names ``role``. has() on a chain errors when a middle link is
    missing, so roles is tested first."""
    return f"(has({placement}.roles) && has({placement}.roles.{role}))"


def _fits_node(role: str) -> dict[str, str]:
    return cel(
        f"!{has_role(role)} || self.roles.{role}.gpus <= self.gpusPerNode",
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
                f"self.mode != 'disaggregated' || ({has_role('actor')} && {has_role('rollout')})",
                "placement.mode=disaggregated needs placement.roles.actor and placement.roles.rollout; add "
                "both or use placement.mode=colocated",
            ),
            cel(
                f"self.mode != 'colocated' || !{has_role('rollout')}",
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
