"""GRPO_ROLLBACK is validated at the edge: absent means no rollback, a bad value names its field."""

from __future__ import annotations

import json

import pytest
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.rollback.request import parse_request, request_from_env


def _raw(**overrides: object) -> str:
    body = {"attempt": 2, "step": 40, "detector": "grad_spike", "learningRate": 5e-7, "klLossCoef": None}
    return json.dumps({**body, **overrides})


def test_the_operators_value_parses_with_its_camel_case_names() -> None:
    request = parse_request(_raw())
    assert request is not None
    assert (request.attempt, request.step, request.detector) == (2, 40, "grad_spike")
    assert (request.learning_rate, request.kl_loss_coef) == (5e-7, None)


def test_absent_or_empty_means_no_rollback() -> None:
    assert request_from_env({}) is None
    assert parse_request("  ") is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"step": -1}, "GRPO_ROLLBACK.step"),
        ({"step": "40"}, "GRPO_ROLLBACK.step"),
        ({"attempt": 1}, "GRPO_ROLLBACK.attempt"),
        ({"learningRate": 0}, "GRPO_ROLLBACK.learningRate"),
        ({"klLossCoef": -0.1}, "GRPO_ROLLBACK.klLossCoef"),
        ({"lr": 1e-6}, "GRPO_ROLLBACK.lr: unknown field"),
    ],
)
def test_a_bad_field_is_named(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(GrpoConfigError, match=field.replace(".", r"\.")):
        parse_request(_raw(**overrides))


def test_not_json_is_refused_naming_the_variable() -> None:
    with pytest.raises(GrpoConfigError, match="GRPO_ROLLBACK: not JSON"):
        parse_request("{attempt: 2")
    with pytest.raises(GrpoConfigError, match="expected a JSON object"):
        parse_request("[2]")
