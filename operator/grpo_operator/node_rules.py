"""Which nodes a pod may land on, as kube-scheduler decides it, and the rules the operator adds for GPU pods.

GPU pods tolerate the GPU taint themselves. GKE taints every GPU node `nvidia.com/gpu=present:NoSchedule`, and its
ExtendedResourceToleration admission plugin adds `nvidia.com/gpu Exists NoSchedule` to pods that request GPUs;
EKS and most on-premise clusters taint GPU nodes the same way without that plugin. Written into the pod, the
toleration works on both, and the capacity check, which reads only what the pod carries, counts it.

GPU pods avoid nodes whose driver is older than the trainer image needs. GPU Feature Discovery labels a node with
its driver's major version (`nvidia.com/cuda.driver.major`); a required node affinity of two terms (driver above
the floor, or no label at all) keeps the pods off an old-driver node before any GPU is taken, and leaves nodes
without GFD alone (the operator warns about those instead). An old driver otherwise fails at the first CUDA call,
after the whole layout's GPUs were held.

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION: Mapping[str, str] = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
DRIVER_LABEL = "nvidia.com/cuda.driver.major"
# The trainer image's CUDA 13 wheels need the R580 driver branch or later (docs/troubleshooting.md).
DEFAULT_DRIVER_FLOOR = 580
# Labels that name a node's pool on the clouds and autoscalers users run, in the order they are asked.
POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "node.kubernetes.io/instance-type",
)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching (an empty key with Exists tolerates every taint)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        if not t.get("key"):
            if operator == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def with_gpu_toleration(tolerations: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The tolerations of a GPU pod: the user's, and the GPU taint's unless one of them already covers it."""
    gpu_taint = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
    if tolerates(tolerations, gpu_taint) and tolerates(tolerations, {**gpu_taint, "value": ""}):
        return tuple(tolerations)
    return (*tolerations, dict(GPU_TOLERATION))


def driver_terms(floor: int) -> tuple[Mapping[str, Any], ...]:
    """Required nodeSelectorTerms (ORed) keeping a GPU pod off nodes whose GFD label says an older driver."""
    return (
        {"matchExpressions": [{"key": DRIVER_LABEL, "operator": "Gt", "values": [str(floor - 1)]}]},
        {"matchExpressions": [{"key": DRIVER_LABEL, "operator": "DoesNotExist"}]},
    )


def with_required(terms: Sequence[Mapping[str, Any]], expressions: Sequence[Mapping[str, Any]]
                  ) -> tuple[Mapping[str, Any], ...]:
    """Required nodeSelectorTerms that also demand every one of `expressions` (added to each ORed term)."""
    if not expressions:
        return tuple(terms)
    if not terms:
        return ({"matchExpressions": [dict(e) for e in expressions]},)
    return tuple({**term, "matchExpressions": [*(term.get("matchExpressions") or ()), *map(dict, expressions)]}
                 for term in terms)


def floor_of(terms: Sequence[Mapping[str, Any]]) -> int | None:
    """The driver floor `driver_terms` wrote into `terms`, or None."""
    for term in terms:
        for e in term.get("matchExpressions") or ():
            if e.get("key") == DRIVER_LABEL and e.get("operator") == "Gt":
                bound = _integer(str((e.get("values") or [""])[0]))
                return None if bound is None else bound + 1
    return None


def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _expression_holds(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = [str(v) for v in expression.get("values") or []]
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and len(values) == 1:
        have, bound = _integer(value), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def matches_terms(labels: Mapping[str, str], terms: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a node with `labels` satisfies required nodeSelectorTerms (terms ORed, expressions ANDed);
    no terms: every node."""
    if not terms:
        return True
    return any(all(_expression_holds(labels, e) for e in term.get("matchExpressions") or ()) for term in terms)


def driver_major(labels: Mapping[str, str]) -> int | None:
    return _integer(labels.get(DRIVER_LABEL))


def pool_of(name: str, labels: Mapping[str, str]) -> str:
    """How a user would name the node's pool: its cloud or autoscaler pool label, else the node itself."""
    for label in POOL_LABELS:
        if label in labels:
            return f"{label}={labels[label]}"
    return name
