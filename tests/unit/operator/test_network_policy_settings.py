"""GRPO_OPERATOR_NETWORK_POLICY* settings: on by default, off on request, selectors and identity read, bad values
named at start-up."""

from __future__ import annotations

import pytest
from grpo_operator.render.network_policy import NetworkPeers, OperatorIdentity
from grpo_operator.settings import OperatorSettings

P = "GRPO_OPERATOR_NETWORK_POLICY"


def test_the_policy_is_on_by_default_and_an_operator_outside_a_pod_admits_none() -> None:
    peers = OperatorSettings.from_env({}).network_policy
    assert peers == NetworkPeers()
    assert peers is not None and peers.operator is None and peers.metrics_namespaces is None


@pytest.mark.parametrize("value", ["false", "False", " false "])
def test_false_turns_the_policy_off(value: str) -> None:
    assert OperatorSettings.from_env({P: value}).network_policy is None


def test_selectors_and_the_operators_pods_are_read_from_json() -> None:
    peers = OperatorSettings.from_env({
        P: "true",
        P + "_KUBERAY_NAMESPACES": '{"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}}',
        P + "_KUBERAY_PODS": '{"matchExpressions": [{"key": "app", "operator": "In", "values": ["kuberay"]}]}',
        P + "_METRICS_NAMESPACES": '{"matchLabels": {"team": "monitoring"}}',
        P + "_OPERATOR_NAMESPACE": "grpo-system",
        P + "_OPERATOR_LABELS": '{"app.kubernetes.io/name": "grpo-operator"}',
    }).network_policy
    assert peers == NetworkPeers(
        kuberay_namespaces={"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}},
        kuberay_pods={"matchExpressions": [{"key": "app", "operator": "In", "values": ["kuberay"]}]},
        metrics_namespaces={"matchLabels": {"team": "monitoring"}},
        operator=OperatorIdentity("grpo-system", {"app.kubernetes.io/name": "grpo-operator"}),
    )


def test_an_operator_namespace_without_its_labels_admits_no_operator_pod() -> None:
    """Labels alone would admit any pod so labelled, in any namespace; a namespace alone, every pod in it."""
    peers = OperatorSettings.from_env({P + "_OPERATOR_NAMESPACE": "grpo-system"}).network_policy
    assert peers is not None and peers.operator is None


@pytest.mark.parametrize(("variable", "value", "says"), [
    (P, "yes", "expected true or false"),
    (P + "_KUBERAY_PODS", "app=kuberay", "not JSON"),
    (P + "_KUBERAY_NAMESPACES", '["kuberay-system"]', "expected a JSON object"),
    (P + "_METRICS_NAMESPACES", '{"matchLabel": {"a": "b"}}', "['matchLabel']"),
    (P + "_OPERATOR_LABELS", '"grpo-operator"', "expected a JSON object"),
])
def test_a_bad_value_stops_the_operator_naming_the_variable(variable: str, value: str, says: str) -> None:
    env = {variable: value, P + "_OPERATOR_NAMESPACE": "grpo-system"}
    with pytest.raises(SystemExit) as stopped:
        OperatorSettings.from_env(env)
    assert variable in str(stopped.value) and says in str(stopped.value)
