"""docs/runtimes.md and docs/multi-node.md quote the operator: every refusal message they print is the one the
CRD or the operator gives, and every variable and resource a network mode renders is in the multi-node table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api import GRPOJobSpec, GRPORuntimeSpec, NetworkSpec
from grpo_operator.crd import build_runtime_crd
from grpo_operator.network import MULTUS_NETWORKS, network_override
from grpo_operator.plan import Plan, PlanError, plan
from grpo_operator.pod_security import asks, refusal_message, refused
from grpo_operator.runtimes import RuntimeProblem, apply_runtime, choose_runtime

ROOT = Path(__file__).resolve().parents[3]
RUNTIMES_DOC = (ROOT / "docs" / "runtimes.md").read_text()
MULTI_NODE_DOC = (ROOT / "docs" / "multi-node.md").read_text()
REFERENCE = yaml.safe_load((ROOT / "examples" / "reference-disaggregated.yaml").read_text())["spec"]
ADMISSION_POLICY = (ROOT / "charts" / "grpo-operator" / "templates" / "admission-policy.yaml").read_text()


def _messages(node: Any) -> list[str]:
    """Every x-kubernetes-validations message in a schema."""
    if isinstance(node, dict):
        found = [rule["message"] for rule in node.get("x-kubernetes-validations") or []]
        return found + [m for value in node.values() for m in _messages(value)]
    if isinstance(node, list):
        return [m for value in node for m in _messages(value)]
    return []


def _quoted(message: str, doc: str = RUNTIMES_DOC) -> bool:
    return f"`{message}`" in doc


def test_every_rule_of_the_grporuntime_crd_is_quoted_exactly() -> None:
    messages = set(_messages(build_runtime_crd()["spec"]["versions"][0]["schema"]))
    assert len(messages) >= 10
    assert [m for m in sorted(messages) if not _quoted(m)] == []


def test_the_operators_runtime_refusals_are_quoted_exactly() -> None:
    with pytest.raises(RuntimeProblem) as missing:
        choose_runtime("gke-h100", {})
    with pytest.raises(RuntimeProblem) as ambiguous:
        choose_runtime(None, {name: {"spec": {"default": True}} for name in ("a", "b")})
    for problem in (missing.value, ambiguous.value):
        assert f"| `{problem.reason}` |" in RUNTIMES_DOC
        assert _quoted(problem.message), problem.reason


def _plan(spec: GRPOJobSpec) -> Plan:
    return plan(spec, name="job", namespace="team-a", default_image="trainer")


def test_the_pod_security_refusal_of_a_runtimes_host_path_in_a_restricted_namespace_is_quoted_exactly() -> None:
    runtime = GRPORuntimeSpec.model_validate({"pods": {"actor": {"volumes": [
        {"name": "nccl-topo", "hostPath": {"path": "/opt/nccl"}, "mountPath": "/opt/nccl"}]}}})
    spec, _ = apply_runtime(GRPOJobSpec.model_validate(REFERENCE), runtime)
    job_plan = _plan(spec)
    shapes = [("head", job_plan.head), *((group.role, group.pod) for group in job_plan.groups)]
    wanted = [ask for role, shape in shapes for ask in asks(role, shape.override)]
    assert _quoted(refusal_message("team-a", "restricted", refused("restricted", wanted)))


def test_rdma_asks_for_nothing_restricted_refuses_and_the_docs_say_no_capability_is_added() -> None:
    job_plan = _plan(GRPOJobSpec.model_validate({**REFERENCE, "network": {"mode": "rdma"}}))
    assert [ask for group in job_plan.groups for ask in asks(group.role, group.pod.override)] == []
    assert "(spec.network: rdma adds IPC_LOCK" not in RUNTIMES_DOC
    assert "privileged` (IPC_LOCK)" not in MULTI_NODE_DOC and "capability `IPC_LOCK` added" not in MULTI_NODE_DOC


def test_the_admission_policys_host_refusal_is_quoted_as_the_chart_words_it() -> None:
    """The policy's first message, its folded CEL string filled in for namespace team-a at level restricted."""
    block = re.search(r"messageExpression: >-\n(.*?)\n\s*reason: Forbidden", ADMISSION_POLICY, re.DOTALL)
    assert block is not None
    expression = " ".join(line.strip() for line in block.group(1).splitlines())
    assert expression.startswith("'") and expression.endswith("'")
    message = (expression[1:-1].replace("' + namespaceObject.metadata.name + '", "team-a")
               .replace("' + variables.level + '", "restricted"))
    assert "'" not in message and "rdma" not in message
    assert f"\n{message}\n" in RUNTIMES_DOC


def test_the_operators_refusals_of_mixed_host_network_and_a_path_mounted_twice_are_quoted_exactly() -> None:
    mixed = GRPOJobSpec.model_validate({**REFERENCE, "pods": {"actor": {"hostNetwork": True}}})
    with pytest.raises(PlanError) as host_network:
        _plan(mixed)
    runtime = GRPORuntimeSpec.model_validate({"pods": {"actor": {"volumes": [
        {"name": "cache", "emptyDir": {}, "mountPath": "/cache"}]}}})
    job = GRPOJobSpec.model_validate({**REFERENCE, "pods": {"actor": {"volumes": [
        {"name": "scratch", "emptyDir": {}, "mountPath": "/cache"}]}}})
    with pytest.raises(PlanError) as twice:
        _plan(apply_runtime(job, runtime)[0])
    for refusal in (host_network.value, twice.value):
        assert _quoted(str(refusal)), str(refusal)


def test_the_efa_refusal_of_a_spec_around_the_crd_is_quoted_exactly() -> None:
    spec = GRPOJobSpec.model_validate({**REFERENCE, "network": {"mode": "efa"}})
    with pytest.raises(PlanError) as refusal:
        _plan(spec)
    assert _quoted(str(refusal.value))


@pytest.mark.parametrize("network", [
    {"mode": "tcp", "socketInterface": "eth0"},
    {"mode": "rdma", "rdma": {"hcas": ["mlx5_0"], "gidIndex": 3, "networks": ["roce"]}},
    {"mode": "efa", "efa": {"devicesPerPod": 32}},
])
def test_the_multi_node_table_names_everything_a_mode_renders(network: dict[str, Any]) -> None:
    override = network_override(NetworkSpec.model_validate(network))
    assert override is not None
    for env in override.env or ():
        assert f"`{env.name}=" in MULTI_NODE_DOC, env.name
    for resource in override.resources or {}:
        assert f"`{resource}`" in MULTI_NODE_DOC, resource
    assert not override.capabilities  # no mode adds one (docs/multi-node.md says why)
    for annotation in override.annotations or {}:
        assert annotation == MULTUS_NETWORKS and f"`{annotation}: " in MULTI_NODE_DOC
