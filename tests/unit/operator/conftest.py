"""Fixtures for the operator's pure unit tests: specs built from the committed examples."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJob, GRPOJobSpec
from grpo_operator.plan import Plan
from grpojob_fixtures import example_body, plan_of


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
