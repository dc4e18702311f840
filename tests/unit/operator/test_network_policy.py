"""The NetworkPolicy <job>: which sources reach a job's pods, on which ports, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import METRICS_PORT, Plan
from grpo_operator.reconcile.children import AFTER_PREFLIGHT, creation_waves, training_children
from grpo_operator.reconcile.gate import preflight_children
from grpo_operator.render import render_children, render_network_policy
from grpo_operator.render.network_policy import NetworkPeers, OperatorIdentity
from grpo_operator.render.rayjob import HEAD_PORTS, render_rayjob
from grpo_operator.render.submitter import render_submitter_template

OPERATOR = OperatorIdentity("grpo-system", {"app.kubernetes.io/name": "grpo-operator",
                                            "app.kubernetes.io/instance": "grpo"})
HEAD = {p["name"]: p["containerPort"] for p in HEAD_PORTS}


def _policy(reference: tuple[GRPOJobSpec, Plan], peers: NetworkPeers | None = None) -> dict[str, Any]:
    return render_network_policy(reference[1], peers or NetworkPeers(operator=OPERATOR))


def _rules(policy: dict[str, Any]) -> list[tuple[list[dict[str, Any]] | None, set[int] | None]]:
    """(from, ports) of each ingress rule; None where the rule leaves it out (any source, any port)."""
    return [(rule.get("from"), {p["port"] for p in rule["ports"]} if "ports" in rule else None)
            for rule in policy["spec"]["ingress"]]


def _pod_templates(reference: tuple[GRPOJobSpec, Plan]) -> dict[str, dict[str, Any]]:
    cluster = render_rayjob(*reference)["spec"]["rayClusterSpec"]
    templates = {"head": cluster["headGroupSpec"]["template"], "submitter": render_submitter_template(*reference)}
    templates.update({g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]})
    return templates


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "these tests read matchLabels only"
    return selector["matchLabels"].items() <= labels.items()


def test_the_policy_is_ingress_only_named_and_labelled_as_the_jobs_child(reference) -> None:
    policy = _policy(reference)
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert policy["metadata"]["name"] == "qwen2-7b-reference"
    assert policy["metadata"]["namespace"] == "team-a"
    assert policy["metadata"]["labels"]["grpo.dev/job"] == "qwen2-7b-reference"
    # Egress stays open (reward functions, HuggingFace, S3): not listed, so not restricted.
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # The handlers adopt it, as every child (render/__init__.py).
    assert "ownerReferences" not in policy["metadata"]


def test_the_policy_selects_every_pod_of_the_job_and_no_other_jobs(reference) -> None:
    selector = _policy(reference)["spec"]["podSelector"]
    templates = _pod_templates(reference)
    assert {"head", "submitter", "actor", "rollout", "reward"} <= set(templates)
    for role, template in templates.items():
        assert _selects(selector, template["metadata"]["labels"]), role
    other = {**templates["head"]["metadata"]["labels"], "grpo.dev/job": "another-job"}
    assert not _selects(selector, other)


def test_the_jobs_own_pods_reach_every_port_of_each_other(reference) -> None:
    own, *_ = _rules(_policy(reference))
    sources, ports = own
    assert ports is None  # Ray's GCS, raylets, object managers, workers and NCCL use many, partly random ports
    assert sources == [{"podSelector": _policy(reference)["spec"]["podSelector"]}]  # this namespace only
    assert _selects(sources[0]["podSelector"], _pod_templates(reference)["submitter"]["metadata"]["labels"])


def test_kuberay_reaches_only_the_dashboard_port_from_its_own_namespace(reference) -> None:
    peers = NetworkPeers(kuberay_namespaces={"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}},
                         kuberay_pods={"matchLabels": {"app": "kuberay"}})
    rule = next(r for r in _rules(_policy(reference, peers)) if r[0] and "namespaceSelector" in r[0][0])
    assert rule == ([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}},
                      "podSelector": {"matchLabels": {"app": "kuberay"}}}], {HEAD["dashboard"]})
    assert HEAD["dashboard"] == 8265


def test_the_operator_reaches_only_the_dashboard_port_from_its_namespace_and_pods(reference) -> None:
    rules = _rules(_policy(reference))
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "grpo-system"}},
                "podSelector": {"matchLabels": OPERATOR.pod_labels}}
    assert ([operator], {HEAD["dashboard"]}) in rules


def test_an_operator_outside_any_pod_admits_no_operator_pod(reference) -> None:
    rules = _rules(_policy(reference, NetworkPeers(operator=None)))
    assert len(rules) == len(_rules(_policy(reference))) - 1
    operator_pods = {"matchLabels": OPERATOR.pod_labels}
    assert not [r for r in rules if r[0] and any(peer.get("podSelector") == operator_pods for peer in r[0])]


def test_metrics_ports_are_open_to_any_scraper_by_default(reference) -> None:
    metrics = _rules(_policy(reference))[-1]
    assert metrics == (None, {METRICS_PORT, HEAD["metrics"]})
    assert {METRICS_PORT, HEAD["metrics"]} == {HEAD["grpo-metrics"], 8080}


def test_metrics_scrapers_can_be_narrowed_to_namespaces(reference) -> None:
    monitoring = {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    metrics = _rules(_policy(reference, NetworkPeers(operator=OPERATOR, metrics_namespaces=monitoring)))[-1]
    assert metrics == ([{"namespaceSelector": monitoring}], {METRICS_PORT, HEAD["metrics"]})


def test_nothing_else_is_admitted(reference) -> None:
    """Four rules: the job's pods, KubeRay, the operator, scrapers. Every rule from outside the job names ports,
    and only the dashboard and the metrics ports; the GCS (6379) and Ray client (10001) ports are the job's own."""
    rules = _rules(_policy(reference))
    assert len(rules) == 4
    outside = rules[1:]
    opened = set().union(*(ports or set() for _, ports in outside))
    assert all(ports for _, ports in outside)
    assert opened == {HEAD["dashboard"], HEAD["metrics"], HEAD["grpo-metrics"]}
    assert not {HEAD["gcs-server"], HEAD["client"]} & opened
    for rule in _policy(reference)["spec"]["ingress"]:
        assert all(p["protocol"] == "TCP" for p in rule.get("ports", []))


def test_policy_ports_follow_the_head_containers_ports(reference) -> None:
    """The policy names ports by number (workers declare none): the numbers are the head's, whatever they become."""
    head = _pod_templates(reference)["head"]["spec"]["containers"][0]["ports"]
    declared = {p["name"]: p["containerPort"] for p in head}
    opened = set().union(*(ports or set() for _, ports in _rules(_policy(reference))))
    assert opened == {declared["dashboard"], declared["metrics"], declared["grpo-metrics"]}


@pytest.mark.parametrize("peers", [None, NetworkPeers(operator=OPERATOR)], ids=["off", "on"])
def test_the_policy_is_a_child_only_when_the_setting_is_on(reference, peers: NetworkPeers | None) -> None:
    kinds = [c["kind"] for c in render_children(*reference, network_policy=peers)]
    assert kinds.count("NetworkPolicy") == (0 if peers is None else 1)


def test_the_policy_is_owned_and_created_a_wave_before_the_rayjob(reference) -> None:
    children = training_children(*reference, NetworkPeers())
    first, second = creation_waves(children)
    assert "NetworkPolicy" in [c.kind for c in first]
    assert "RayJob" in [c.kind for c in second]
    assert next(c for c in children if c.kind == "NetworkPolicy").owned  # it goes with the GRPOJob


def test_a_job_with_a_preflight_gets_its_policy_too(reference) -> None:
    """The preflight creates its children, and after it passes only the kinds of AFTER_PREFLIGHT are created
    (gate.start_training): together they are every training child, the NetworkPolicy included."""
    training = {(c.kind, c.name) for c in training_children(*reference, NetworkPeers())}
    preflight = {(c.kind, c.name) for c in preflight_children(*reference, {})}
    after = {(kind, name) for kind, name in training if kind in AFTER_PREFLIGHT}
    assert training <= preflight | after
    assert ("NetworkPolicy", "qwen2-7b-reference") in after
