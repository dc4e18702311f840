"""The generated CRD: committed copy in sync, structural, documented, bounded for CEL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.crd import build_crd, render_yaml

CRD_FILE = Path(__file__).resolve().parents[3] / "crds" / "grpojob.yaml"
Node = dict[str, Any]


def _schema() -> Node:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _walk(node: Node, path: str = "") -> Iterator[tuple[str, Node]]:
    """Every schema node with its dotted path (list items as [])."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _rules(node: Node) -> list[dict[str, str]]:
    return node.get("x-kubernetes-validations", [])


def _all_messages() -> list[str]:
    return [rule["message"] for _, node in _walk(_schema()) for rule in _rules(node)]


def test_committed_crd_matches_build_crd() -> None:
    assert CRD_FILE.read_text() == render_yaml(), (
        "crds/grpojob.yaml is stale: run `python -m grpo_operator.crd > crds/grpojob.yaml`"
    )
    assert yaml.safe_load(CRD_FILE.read_text()) == build_crd()


def test_crd_names_scope_and_subresources() -> None:
    crd = build_crd()
    assert crd["metadata"]["name"] == "grpojobs.grpo.dev"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"], names["shortNames"]) == (
        "GRPOJob",
        "grpojobs",
        "grpojob",
        ["grpo"],
    )
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Step": ".status.progress.step",
        "Reward": ".status.progress.rewardMean",
        "Age": ".metadata.creationTimestamp",
    }


def test_schema_is_structural() -> None:
    text = yaml.safe_dump(build_crd())
    assert "$ref" not in text and "$defs" not in text and "nullable" not in text
    for path, node in _walk(_schema()):
        if "anyOf" in node:
            # The one union a structural schema allows: int-or-string quantities.
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node and path.endswith("}"):
            continue
        assert "type" in node, f"{path or '<root>'} has no type"
        assert node["type"] != "null", path
        assert "title" not in node, path
        if node["type"] == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
            assert node.get("additionalProperties") is not False, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            # OpenAPI v3.0 spells these as flags beside minimum/maximum.
            assert node.get(bound, True) is True, path


def test_every_spec_field_has_a_description() -> None:
    missing = [
        path
        for path, node in _walk(_schema()["properties"]["spec"], "spec")
        if not path.endswith(("[]", "{}")) and path != "spec" and not node.get("description")
    ]
    assert not missing, f"fields without kubectl-explain text: {missing}"


def test_every_status_field_has_a_description() -> None:
    missing = [
        path
        for path, node in _walk(_schema()["properties"]["status"], "status")
        if not path.endswith(("[]", "{}")) and path != "status" and not node.get("description")
    ]
    assert not missing, missing


def test_spec_strings_lists_and_maps_are_bounded_for_cel_cost() -> None:
    unbounded = []
    for path, node in _walk(_schema()["properties"]["spec"], "spec"):
        kind = node.get("type")
        if node.get("x-kubernetes-int-or-string"):
            kind = "string"
        bounded = {
            "string": "maxLength" in node or "enum" in node,
            "array": "maxItems" in node,
            # A free-form EnvVarSource (valueFrom) is compared by no rule beyond the env list's bound.
            "object": "properties" in node or "maxProperties" in node or path.endswith("valueFrom"),
        }.get(kind, True)
        if not bounded:
            unbounded.append(path)
    assert not unbounded, f"unbounded under spec (the apiserver's CEL cost check will refuse): {unbounded}"


def test_spec_objects_carry_defaults_the_apiserver_applies() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    assert spec["placement"]["default"]["gpusPerNode"] == 8
    assert spec["placement"]["default"]["mode"] == "colocated"
    assert "default" not in spec["rollout"]["properties"]["gpuMemoryUtilization"]  # the preflight sizes it
    assert spec["algorithm"]["properties"]["klLoss"]["default"] == {
        "enabled": True,
        "coef": 0.001,
        "type": "low_var_kl",
    }
    assert spec["checkpoints"]["properties"]["volume"]["default"] == {}  # a new PVC the preflight sizes
    assert set(_schema()["properties"]["spec"]["required"]) == {"model", "data", "training"}
    # Status is written by the operator as it means it: no defaults there.
    assert "default" not in yaml.safe_dump(_schema()["properties"]["status"])


@pytest.mark.parametrize(
    "message",
    [
        "a length reward runs on CPU; remove placement.roles.reward or use reward.type=model",
        "a function reward runs on CPU; remove placement.roles.reward or use reward.type=model",
    ],
)
def test_reward_pool_refused_for_rule_reward_by_the_crd(message: str) -> None:
    spec = _schema()["properties"]["spec"]
    rules = {r["message"]: r["rule"] for r in _rules(spec)}
    assert message in rules
    assert "placement.roles.reward" in rules[message]


def test_crd_carries_a_rule_for_each_cross_field_constraint() -> None:
    messages = " | ".join(_all_messages())
    for fragment in [
        "placement.roles.actor.gpus must not exceed placement.gpusPerNode",
        "placement.roles.rollout.gpus must not exceed placement.gpusPerNode",
        "placement.roles.reward.gpus must not exceed placement.gpusPerNode",
        "placement.roles.rollout.gpus must be a multiple of rollout.tensorParallelSize",
        "reward.type=function needs reward.function",
        "reward.type=model needs reward.model",
        "placement.mode=disaggregated needs placement.roles.actor and placement.roles.rollout",
        "placement.mode=colocated runs vLLM on the actor's GPUs; remove placement.roles.rollout",
        "spec.training needs exactly one of totalSteps or epochs",
        "checkpoints.volume takes claimName (an existing PVC) or size (a new PVC), not both",
        "export.enabled=true needs export.target",
        "metadata.name must be at most 47 characters",
        "placement.mode=disaggregated with reward.type=model needs placement.roles.reward",
        "data.trainBatchSize must be a multiple of algorithm.miniBatchSize",
    ]:
        assert fragment in messages, fragment


def test_spec_is_frozen_once_training_has_started_except_suspend_verl_and_preflight() -> None:
    root = _schema()
    spec = root["properties"]["spec"]
    # checkpoints from creation on: the operator may have created its PVC, which it never deletes.
    frozen_at_creation = {
        name for name, node in spec["properties"].items() if any(r["rule"] == "self == oldSelf" for r in _rules(node))
    }
    assert frozen_at_creation == {"checkpoints"}
    editable = "oldSelf.status.phase in ['Invalid', 'Preflight']"
    root_rules = [r for r in _rules(root) if editable in r["rule"]]
    frozen = {m.group(1) for r in root_rules for m in [re.search(r"oldSelf\.spec\.([\w.]+?)\)*$", r["rule"])] if m}
    assert frozen == {
        "guardrails", "model", "data", "training", "algorithm", "rollout", "reward", "placement", "export", "security",
        "rehearsal", "image", "serviceAccountName", "imagePullSecrets", "env", "podMetadata", "runtime", "pods",
        "network",
        "scheduling.queueName", "scheduling.priorityClassName", "scheduling.activeDeadlineSeconds",
        "scheduling.retries", "scheduling.keepFailedClusterSeconds",
    }
    rules = " ".join(r["rule"] for r in _rules(root))
    for editable_field in ("suspend", "verl", "preflight"):
        assert f".{editable_field}" not in rules, editable_field
    # Every transition rule names the field and the way out.
    for message in _all_messages():
        if "immutable" in message:
            assert message.startswith("spec.") and "delete the GRPOJob" in message


_FIELD_REF = re.compile(r"\b(?:self|oldSelf)((?:\.\w+)+)(\()?")


def test_cel_rules_reference_only_fields_that_exist() -> None:
    """The rules' logic is proven against a real apiserver in e2e; a misspelt field is caught here."""
    checked = 0
    for path, node in _walk(_schema()):
        for rule in _rules(node):
            for match in _FIELD_REF.finditer(rule["rule"]):
                segments = match.group(1).lstrip(".").split(".")
                if match.group(2):  # a method call such as self.metadata.name.size()
                    segments = segments[:-1]
                target = node
                for segment in segments:
                    if target.get("type") == "object" and "properties" not in target:
                        break  # metadata: the apiserver's own schema
                    assert segment in target.get("properties", {}), f"{path}: {rule['rule']!r} names {segment!r}"
                    target = target["properties"][segment]
                checked += 1
    assert checked > 40
