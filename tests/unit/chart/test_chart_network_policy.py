"""The chart's networkPolicy values: what reaches the operator's settings, and the one RBAC verb they need."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.render.network_policy import NetworkPeers
from grpo_operator.settings import OperatorSettings
from test_chart_render import CHART, KUBE_VERSION, NAMESPACED, _container, _rules, helm, render


def _settings(*values: str) -> OperatorSettings:
    env = {e["name"]: e["value"] for e in _container(render(*values))["env"] if "value" in e}
    return OperatorSettings.from_env(env)


def _network_policy_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rules if "networkpolicies" in r["resources"]]


@pytest.mark.parametrize(("values", "kind"), [((), "ClusterRole"), (tuple(NAMESPACED), "Role")])
def test_the_operator_may_only_create_network_policies_and_only_while_it_makes_them(
        values: tuple[str, ...], kind: str) -> None:
    granted = _network_policy_rules(_rules(render(*values), kind))
    expected = {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]}
    # One rule per Role (namespaced mode has one Role per watched namespace).
    assert granted and all(rule == expected for rule in granted)
    assert _network_policy_rules(_rules(render(*values, "networkPolicy.enabled=false"), kind)) == []


def test_turning_the_policy_off_reaches_the_operator() -> None:
    assert _settings("networkPolicy.enabled=false").network_policy is None
    assert _settings().network_policy is not None


def test_kuberay_and_scraper_selectors_reach_the_operator() -> None:
    peers = _settings(
        "networkPolicy.kuberay.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=ray-system",
        "networkPolicy.kuberay.podSelector.matchLabels.app\\.kubernetes\\.io/name=kuberay",
        "networkPolicy.metrics.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
    ).network_policy
    assert peers is not None
    # --set merges into the defaults' maps: the default labels stay beside the ones set.
    assert peers.kuberay_namespaces == {"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}}
    assert peers.kuberay_pods["matchLabels"]["app.kubernetes.io/name"] == "kuberay"
    assert peers.metrics_namespaces == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}


def test_scrapers_are_unrestricted_unless_namespaces_are_named() -> None:
    peers = _settings().network_policy
    assert peers is not None and peers.metrics_namespaces is None
    assert peers.kuberay_namespaces == NetworkPeers().kuberay_namespaces


def test_the_operator_is_admitted_as_the_release_pods() -> None:
    peers = _settings().network_policy
    assert peers is not None and peers.operator is not None
    deployment = next(d for d in render() if d["kind"] == "Deployment")
    assert peers.operator.namespace == deployment["metadata"]["namespace"] == "grpo-system"
    assert peers.operator.pod_labels == deployment["spec"]["selector"]["matchLabels"]
    assert peers.operator.pod_labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(("value", "named"), [
    ("networkPolicy.enabled=yes", "/networkPolicy/enabled"),
    ("networkPolicy.kuberay.namespaceSelector.matchLabel.a=b", "matchLabel"),
    ("networkPolicy.kuberay.podSelector=none", "/networkPolicy/kuberay/podSelector"),
    ("networkPolicy.metrics.namespaceSelector.matchExpressions[0].key=k", "operator"),
])
def test_schema_refuses_a_wrong_network_policy_value_naming_it(value: str, named: str) -> None:
    result = helm("template", "grpo", str(CHART), "--kube-version", KUBE_VERSION, "--set", value)
    assert result.returncode != 0, f"helm template accepted {value}"
    assert named in result.stdout + result.stderr
