"""Helpers for the operator's unit tests: specs and plans built from the committed examples.

A uniquely named module (not conftest) so that `import` finds it whatever other test directories
are collected in the same run."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, plan

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NAMESPACE = "team-a"
IMAGE = "registry.example.com/grpo-trainer:test"


def example_body(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def spec_with(body: dict[str, Any], edit: Callable[[dict[str, Any]], object] | None = None) -> GRPOJobSpec:
    """The example's spec after ``edit`` changed its (camelCase) dict."""
    raw = copy.deepcopy(body["spec"])
    if edit is not None:
        edit(raw)
    return GRPOJobSpec.model_validate(raw)


def plan_of(spec: GRPOJobSpec, name: str = "job") -> Plan:
    return plan(spec, name=name, namespace=NAMESPACE, default_image=IMAGE)


# The default local cluster's pool labels (hack/grpo_devcluster/kwok_config.py), as a user pins roles to pools.
POOLS = {"actor": "train", "rollout": "rollout", "reward": "rollout"}


def pinned_to_pools(raw: dict[str, Any]) -> None:
    """An edit for spec_with: each role of the example pinned to its pool by nodeSelector."""
    for role, spec in raw["placement"]["roles"].items():
        spec["nodeSelector"] = {"grpo.dev/pool": POOLS[role]}
