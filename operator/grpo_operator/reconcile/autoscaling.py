"""Whether nodes a role lacks may still come: an autoscaler that can add them makes a shortfall a wait, not a refusal.

GPU pools that scale from zero (Karpenter, cluster-autoscaler, GKE node auto-provisioning) have no nodes until a pod
asks for them: refusing such a job and creating no pod means nothing ever scales up. With `autoscaling: auto` (the
default) the operator reads Karpenter's NodePools and counts a role as coming when one of them may make nodes for
it: its limits leave room for the role's GPUs, its taints are tolerated, and every label the role selects is put
on its nodes (template labels or requirements) or is one the instance type decides (zone, instance type, GPU
labels). `always` treats every shortfall as coming (cluster-autoscaler keeps no objects to read; the scheduler's and
its events then tell the story); `never` refuses as before.

Pure: the handlers read the NodePools and call these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from grpo_operator.node_rules import GPU_RESOURCE, matches_terms, tolerates
from grpo_operator.plan import WorkerGroup, parse_quantity

Mode = Literal["auto", "always", "never"]
MODES: tuple[Mode, ...] = ("auto", "always", "never")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# Labels an autoscaler sets per instance it launches, not per pool: a pool that does not pin them may provide any.
INSTANCE_LABEL_PREFIXES = (
    "topology.kubernetes.io/", "node.kubernetes.io/instance-type", "kubernetes.io/arch", "kubernetes.io/os",
    "karpenter.sh/capacity-type", "karpenter.k8s.aws/", "karpenter.azure.com/", "karpenter.kwok.sh/",
    "cloud.google.com/machine-family", "nvidia.com/gpu.",
)


@dataclass(frozen=True)
class NodePoolView:
    name: str
    labels: Mapping[str, str]
    requirements: tuple[Mapping[str, Any], ...]
    taints: tuple[Mapping[str, Any], ...]
    gpu_limit: Decimal | None

    @classmethod
    def of(cls, pool: Mapping[str, Any]) -> NodePoolView:
        spec = pool.get("spec") or {}
        template = spec.get("template") or {}
        limit = (spec.get("limits") or {}).get(GPU_RESOURCE)
        try:
            gpu_limit = parse_quantity(str(limit)) if limit is not None else None
        except (InvalidOperation, ValueError):
            gpu_limit = None
        return cls(
            name=str((pool.get("metadata") or {}).get("name", "")),
            labels=dict((template.get("metadata") or {}).get("labels") or {}),
            requirements=tuple((template.get("spec") or {}).get("requirements") or ()),
            taints=tuple((template.get("spec") or {}).get("taints") or ()),
            gpu_limit=gpu_limit,
        )


def _selects(pool: NodePoolView, key: str, value: str) -> bool:
    if key in pool.labels:
        return pool.labels[key] == value
    for requirement in pool.requirements:
        if requirement.get("key") == key:
            return matches_terms({key: value}, [{"matchExpressions": [requirement]}])
    return key.startswith(INSTANCE_LABEL_PREFIXES)


def may_provide(pool: NodePoolView, group: WorkerGroup) -> bool:
    """Whether the NodePool may make nodes the group's pods can use (its current use aside)."""
    if pool.gpu_limit is not None and pool.gpu_limit < group.total_gpus:
        return False
    blocking = [t for t in pool.taints if t.get("effect") in _BLOCKING_EFFECTS]
    if not all(tolerates(group.pod.tolerations, t) for t in blocking):
        return False
    if not all(_selects(pool, k, v) for k, v in group.pod.node_selector.items()):
        return False
    return matches_terms(pool.labels, group.pod.node_terms)  # a driver label the pool puts on its nodes


def autoscalers_for(group: WorkerGroup, pools: Sequence[NodePoolView], mode: Mode) -> list[str]:
    """Who may add nodes for the group, in words for a condition; empty: nobody, a shortfall is final."""
    if mode == "never":
        return []
    if mode == "always":
        return ["the cluster's autoscaler (operator setting autoscaling=always)"]
    return [f"Karpenter NodePool {p.name}" for p in pools if may_provide(p, group)]
