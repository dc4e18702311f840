"""Can the nodes a role may use hold its pods at all? And how much memory do their GPUs have?

Judged from each node's allocatable resources (what the kubelet offers pods), not from current usage:
a busy pool frees up, a pool too small never does. A node is one of a role's when it carries the role's
nodeSelector labels, the role tolerates its NoSchedule/NoExecute taints, and it meets the role's required node
affinity (a GPU role's driver floor, node_rules.py). Each role is judged on its own (two roles sharing a pool are
not added up). With Kueue (scheduling.queueName) admission is
Kueue's, and this is not asked.

Pure: the handlers read the nodes and call these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from grpo_operator.node_rules import (
    DRIVER_LABEL,
    GPU_RESOURCE,
    driver_major,
    floor_of,
    matches_terms,
    pool_of,
    tolerates,
)
from grpo_operator.plan import Plan, PodShape, WorkerGroup, parse_quantity

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU, set by NVIDIA's GPU feature discovery
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    allocatable: Mapping[str, str]
    amounts: Mapping[str, Decimal]  # allocatable parsed once (a quantity that does not parse counts as none)

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeView:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        allocatable = dict(status.get("allocatable") or {})
        return cls(
            name=str(meta.get("name", "")),
            labels=dict(meta.get("labels") or {}),
            taints=tuple(spec.get("taints") or ()),
            allocatable=allocatable,
            amounts={resource: _parsed(value) for resource, value in allocatable.items()},
        )

    def amount(self, resource: str) -> Decimal:
        return self.amounts.get(resource, Decimal(0))


def _parsed(quantity: str) -> Decimal:
    try:
        return parse_quantity(quantity)
    except (InvalidOperation, ValueError):
        return Decimal(0)


def selector_string(selector: Mapping[str, str]) -> str:
    """A nodeSelector as the API's labelSelector parameter."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def pinned_to(node: NodeView, pod: PodShape) -> bool:
    """The pod's nodeSelector and tolerations allow the node (its affinity aside)."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    blocking = [t for t in node.taints if t.get("effect") in _BLOCKING_EFFECTS]
    return all(tolerates(pod.tolerations, t) for t in blocking)


def usable(node: NodeView, pod: PodShape) -> bool:
    return pinned_to(node, pod) and matches_terms(node.labels, pod.node_terms)


def pod_wants(group: WorkerGroup) -> dict[str, Decimal]:
    """What one of the group's pods asks of a node, by resource (those it asks nothing of left out)."""
    wants = {GPU_RESOURCE: Decimal(group.gpus), "cpu": parse_quantity(group.pod.cpu),
             "memory": parse_quantity(group.pod.memory)}
    # Extended resources (RDMA or EFA devices, hugepages) from spec.pods and spec.network: a node without them
    # offers none, and the pod would wait for it forever.
    wants.update({resource: parse_quantity(amount) for resource, amount in group.pod.extra_resources.items()})
    return {resource: amount for resource, amount in wants.items() if amount > 0}


def pods_that_fit(node: NodeView, group: WorkerGroup, wants: Mapping[str, Decimal] | None = None) -> int:
    """How many of the group's pods the node's allocatable GPUs, CPUs and memory hold."""
    wants = pod_wants(group) if wants is None else wants
    return int(min(node.amount(resource) / amount for resource, amount in wants.items()))


@dataclass(frozen=True)
class Shortfall:
    field: str
    reason: str
    message: str
    role: str = ""


def _describe(group: WorkerGroup) -> str:
    extra = "".join(f", {amount} {resource}" for resource, amount in sorted(group.pod.extra_resources.items()))
    return f"{group.gpus} {GPU_RESOURCE}, {group.pod.cpu} CPU{extra} and {group.pod.memory} memory"


def _pool(group: WorkerGroup) -> str:
    return "{" + selector_string(group.pod.node_selector) + "}" if group.pod.node_selector else "every node"


def capacity_shortfalls(plan: Plan, nodes: Sequence[NodeView]) -> list[Shortfall]:
    """One shortfall per role whose pool cannot hold its pods even when empty."""
    found = []
    for group in plan.groups:
        if _enough(nodes, group):
            continue
        field = f"placement.roles.{group.role}"
        too_old = _driver_shortfall(field, nodes, group)
        if too_old is not None:
            found.append(too_old)
            continue
        mine = [n for n in nodes if usable(n, group.pod)]
        fit = sum(pods_that_fit(n, group) for n in mine)
        if not mine:
            why = f"no node matches the pool {_pool(group)} (labels, and taints the role tolerates)"
        else:
            biggest = max(mine, key=lambda n: n.amount(GPU_RESOURCE))
            extra = "".join(f", {biggest.allocatable.get(r, '0')} {r}" for r in sorted(group.pod.extra_resources))
            why = (f"the pool {_pool(group)} has {len(mine)} node(s) holding {fit} such pod(s) in all (the largest "
                   f"offers {biggest.allocatable.get(GPU_RESOURCE, '0')} {GPU_RESOURCE}, "
                   f"{biggest.allocatable.get('cpu', '0')} CPU{extra}, {biggest.allocatable.get('memory', '0')} "
                   "memory)")
        found.append(Shortfall(
            field,
            "InsufficientCapacity",
            f"spec.{field}: {group.replicas} pod(s) of {_describe(group)} cannot be placed: {why}. Judged from what "
            f"the nodes can allocate, not current use; add nodes to the pool, change the role's nodeSelector or "
            f"tolerations, or lower its gpus/replicas. The job starts by itself once the nodes exist.",
            group.role,
        ))
    return found


def _driver_shortfall(field: str, nodes: Sequence[NodeView], group: WorkerGroup) -> Shortfall | None:
    """The shortfall when the role's nodes would hold it but for their drivers: said as such, naming the pools."""
    floor = floor_of(group.pod.node_terms)
    if floor is None:
        return None
    allowed = [n for n in nodes if pinned_to(n, group.pod)]
    old = [n for n in allowed if not matches_terms(n.labels, group.pod.node_terms)]
    if not old or sum(pods_that_fit(n, group) for n in allowed) < group.replicas:
        return None  # no old driver in the way, or too small even with them: the usual shortfall
    pools = sorted({f"{pool_of(n.name, n.labels)} (driver {driver_major(n.labels)})" for n in old})
    return Shortfall(
        field,
        "DriverTooOld",
        f"spec.{field}: {group.replicas} pod(s) of {_describe(group)} cannot be placed: the nodes that could hold "
        f"them run an NVIDIA driver older than {floor}, which the trainer image's CUDA needs ({DRIVER_LABEL}, set "
        f"by GPU Feature Discovery): {', '.join(pools)}. The job's GPU pods stay off such nodes rather than fail at "
        f"their first CUDA call. Upgrade the pool's driver to {floor} or later (GKE: a node version whose driver is "
        f"R{floor}+, or gpu-driver-version=latest; EKS: a newer accelerated AMI), or send the role to another pool "
        f"with its nodeSelector. The job starts by itself once such nodes exist.",
        group.role,
    )


def unchecked_driver_pools(plan: Plan, nodes: Sequence[NodeView]) -> list[str]:
    """Pools of GPU nodes a GPU role may use whose driver version no label tells: checked nowhere before the GPUs
    are taken (a warning, not a refusal: GPU Feature Discovery is not everywhere)."""
    pools = {pool_of(n.name, n.labels) for g in plan.groups if g.gpus and g.pod.node_terms
             for n in nodes if n.amount(GPU_RESOURCE) > 0 and DRIVER_LABEL not in n.labels and usable(n, g.pod)}
    return sorted(pools)


def _enough(nodes: Sequence[NodeView], group: WorkerGroup) -> bool:
    """Whether the pool holds the group's pods, reading nodes only until it does: with hundreds of nodes in a
    pool, the first few usually do, and this runs for every job."""
    wants, fit = pod_wants(group), 0
    for node in nodes:
        if usable(node, group.pod):
            fit += pods_that_fit(node, group, wants)
            if fit >= group.replicas:
                return True
    return False


def gpu_memory_by_role(plan: Plan, nodes: Sequence[NodeView], override: int | None) -> dict[str, int]:
    """Bytes of one GPU for each role: placement.gpuMemory, else the smallest label among its usable nodes."""
    memory: dict[str, int] = {}
    for group in plan.groups:
        if override is not None:
            memory[group.role] = override
            continue
        labels = [n.labels.get(GPU_MEMORY_LABEL, "") for n in nodes if usable(n, group.pod)]
        mib = [int(v) for v in labels if v.isdigit()]
        if mib:
            memory[group.role] = min(mib) * 2**20
    return memory
