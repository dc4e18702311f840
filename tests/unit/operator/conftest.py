"""Fixtures for the operator's pure unit tests: specs built from the committed examples."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_operator.api import GRPOJob, GRPOJobSpec
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


@pytest.fixture
def reference_body() -> dict[str, Any]:
    return example_body("reference-disaggregated")


@pytest.fixture
def colocated_body() -> dict[str, Any]:
    return example_body("colocated-length")


@pytest.fixture
def reference_job(reference_body: dict[str, Any]) -> GRPOJob:
    return GRPOJob.model_validate(reference_body)


@pytest.fixture
def reference(reference_job: GRPOJob) -> tuple[GRPOJobSpec, Plan]:
    return reference_job.spec, plan_of(reference_job.spec, reference_job.metadata["name"])


@pytest.fixture
def colocated(colocated_body: dict[str, Any]) -> tuple[GRPOJobSpec, Plan]:
    job = GRPOJob.model_validate(colocated_body)
    return job.spec, plan_of(job.spec, job.metadata["name"])
