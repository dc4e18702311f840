"""The NetworkPolicy ``<job>``: who may open connections to a job's pods (docs/security.md#network-policy).

Ingress only. Egress stays open: the trainer reads its model and data from PVCs, but a user's reward function
may call an API, a model may come from HuggingFace or S3, and an exporter may push; a default-deny egress
would break those jobs in ways the operator cannot foresee, for little gain (the pods run the user's code).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_operator.plan import Plan
from grpo_operator.render.common import JOB_LABEL, metadata
from grpo_operator.render.rayjob import HEAD_PORTS

# The namespace label the apiserver sets on every namespace (Kubernetes >= 1.21): a namespace chosen by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Where KubeRay usually runs, and the component label both of its installs (the Helm chart and the kustomize
# manifests, v1.5 to v1.7) put on its operator pod; the chart's networkPolicy.kuberay values override both.
KUBERAY_NAMESPACES: dict[str, Any] = {"matchLabels": {NAMESPACE_NAME_LABEL: "kuberay-system"}}
KUBERAY_PODS: dict[str, Any] = {"matchLabels": {"app.kubernetes.io/component": "kuberay-operator"}}


def _head_port(name: str) -> int:
    return next(p["containerPort"] for p in HEAD_PORTS if p["name"] == name)


# Numbers, not port names: only the head declares its ports, and Ray exports metrics on 8080 on every node.
DASHBOARD_PORT = _head_port("dashboard")
METRICS_PORTS = (_head_port("grpo-metrics"), _head_port("metrics"))


@dataclass(frozen=True)
class OperatorIdentity:
    """The operator's own pods: its namespace and the chart's selector labels."""

    namespace: str
    pod_labels: dict[str, str]


@dataclass(frozen=True)
class NetworkPeers:
    """Who, besides the job's own pods, may reach them: the chart's networkPolicy values."""

    kuberay_namespaces: dict[str, Any] = field(default_factory=lambda: dict(KUBERAY_NAMESPACES))
    kuberay_pods: dict[str, Any] = field(default_factory=lambda: dict(KUBERAY_PODS))
    # None where the operator runs outside a pod (a developer's machine, the e2e tests): no pod to admit.
    operator: OperatorIdentity | None = None
    # Namespaces whose pods may scrape the metrics ports; None: any source.
    metrics_namespaces: dict[str, Any] | None = None


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _own_pods(plan: Plan) -> dict[str, Any]:
    # Every pod of the job carries this label (render/common.labels, which wins over the user's podMetadata):
    # head, workers, KubeRay's submitter (its template is ours), the preflight and the converter.
    return {"matchLabels": {JOB_LABEL: plan.names.job}}


def render_network_policy(plan: Plan, peers: NetworkPeers) -> dict[str, Any]:
    """Ingress to the job's pods from the job's own pods (every port), KubeRay's and the operator's pods (the
    dashboard port) and scrapers (the metrics ports); nothing else."""
    ingress: list[dict[str, Any]] = [
        # Ray's nodes reach each other on many ports, most of them random (GCS, raylets, object managers,
        # workers, NCCL, vLLM): all ports, from the job's pods only. The submitter reaches the dashboard here.
        {"from": [{"podSelector": _own_pods(plan)}]},
        # KubeRay's RayJob controller polls the job's status on the dashboard, through the head Service.
        {"from": [{"namespaceSelector": peers.kuberay_namespaces, "podSelector": peers.kuberay_pods}],
         "ports": _tcp(DASHBOARD_PORT)},
    ]
    if peers.operator is not None:
        # The dashboard (Ray's job API) is the one port a controller of Ray jobs has reason to call; nothing
        # else of a Ray cluster is the operator's business.
        ingress.append({"from": [{
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: peers.operator.namespace}},
            "podSelector": {"matchLabels": dict(peers.operator.pod_labels)},
        }], "ports": _tcp(DASHBOARD_PORT)})
    # Metrics are from anywhere unless the chart names the scrapers' namespaces: they are read-only numbers of
    # no secrecy (reward, KL, Ray's resource use), and scrapers live in too many places to guess (a monitoring
    # namespace, a managed collector's, an agent on the host network that no namespace selector matches), so a
    # default that guessed wrong would silently lose the metrics the alerts need.
    metrics: dict[str, Any] = {"ports": _tcp(*METRICS_PORTS)}
    if peers.metrics_namespaces is not None:
        metrics = {"from": [{"namespaceSelector": peers.metrics_namespaces}], **metrics}
    ingress.append(metrics)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(plan, plan.names.network_policy, "network"),
        "spec": {"podSelector": _own_pods(plan), "policyTypes": ["Ingress"], "ingress": ingress},
    }
