"""docs/runtimes.md and docs/multi-node.md quote the operator: every refusal message they print is the one the
CRD or the operator gives, and every variable and resource a network mode renders is in the multi-node table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api import GRPOJobSpec, NetworkSpec
from grpo_operator.crd import build_runtime_crd
from grpo_operator.network import MULTUS_NETWORKS, RDMA_CAPABILITY, network_override
from grpo_operator.plan import PlanError, plan
from grpo_operator.pod_security import asks, refusal_message, refused
from grpo_operator.runtimes import RuntimeProblem, choose_runtime

ROOT = Path(__file__).resolve().parents[3]
RUNTIMES_DOC = (ROOT / "docs" / "runtimes.md").read_text()
MULTI_NODE_DOC = (ROOT / "docs" / "multi-node.md").read_text()
REFERENCE = yaml.safe_load((ROOT / "examples" / "reference-disaggregated.yaml").read_text())["spec"]


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


def test_the_pod_security_refusal_of_rdma_in_a_restricted_namespace_is_quoted_exactly() -> None:
    spec = GRPOJobSpec.model_validate({**REFERENCE, "network": {"mode": "rdma"}})
    job_plan = plan(spec, name="job", namespace="team-a", default_image="trainer")
    wanted = [ask for group in job_plan.groups for ask in asks(group.role, group.pod.override)]
    assert _quoted(refusal_message("team-a", "restricted", refused("restricted", wanted), network=True))


def test_the_efa_refusal_of_a_spec_around_the_crd_is_quoted_exactly() -> None:
    spec = GRPOJobSpec.model_validate({**REFERENCE, "network": {"mode": "efa"}})
    with pytest.raises(PlanError) as refusal:
        plan(spec, name="job", namespace="team-a", default_image="trainer")
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
    for capability in override.capabilities or ():
        assert capability == RDMA_CAPABILITY and f"`{capability}` added" in MULTI_NODE_DOC
    for annotation in override.annotations or {}:
        assert annotation == MULTUS_NETWORKS and f"`{annotation}: " in MULTI_NODE_DOC
