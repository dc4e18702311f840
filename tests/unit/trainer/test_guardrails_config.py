"""spec.guardrails (GRPO_GUARDRAILS) is validated at the edge: every error names its field."""

from __future__ import annotations

import pytest
from grpo_trainer.config import worker_env
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.guardrails import GuardrailsConfigError, config_from_env, parse_config
from grpo_trainer.settings import GrpoSettings


def test_no_configuration_means_observe_with_every_detector_on() -> None:
    for raw in (None, "", "  "):
        config = parse_config(raw)
        assert config.mode == "observe"
        assert config.warmup_steps == 20
        assert all(getattr(config.detectors, name).enabled for name in type(config.detectors).model_fields)


def test_the_operator_json_is_read_in_snake_or_camel_case() -> None:
    snake = parse_config(
        '{"mode": "act", "detectors": {"kl_runaway": {"enabled": false, "factor": 20, "min_kl": 0.1}}}'
    )
    camel = parse_config({"mode": "act", "detectors": {"klRunaway": {"enabled": False, "factor": 20, "minKl": 0.1}}})
    assert snake == camel
    assert (snake.mode, snake.detectors.kl_runaway.enabled, snake.detectors.kl_runaway.min_kl) == ("act", False, 0.1)
    assert snake.detectors.grad_spike.enabled  # untouched detectors keep their defaults


def test_the_environment_variable_is_read() -> None:
    assert config_from_env({"GRPO_GUARDRAILS": '{"mode": "act"}'}).mode == "act"
    assert config_from_env({}).mode == "observe"


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"mode": "fix"}, "guardrails.mode"),
        ({"warmupSteps": 10}, "guardrails.warmupSteps: Input should be greater than or equal to 20"),
        ({"detectors": {"kl_runway": {}}}, "guardrails.detectors.kl_runway: unknown field"),
        ({"detectors": {"kl_runaway": {"factor": 1}}}, "guardrails.detectors.kl_runaway.factor"),
        (
            {"detectors": {"gradSpike": {"k": 6}}},
            "guardrails.detectors.gradSpike: Value error, k (6) must not exceed m",
        ),
        (
            {"detectors": {"policy_collapse": {"entropy_ratio": 1.5}}},
            "guardrails.detectors.policy_collapse.entropy_ratio",
        ),
        ({"detectors": {"degenerate_batch": {"clipRatio": "high"}}}, "guardrails.detectors.degenerate_batch.clipRatio"),
        ({"detectors": {"non_finite": {"k": 2}}}, "guardrails.detectors.non_finite.k: unknown field"),
        ("[1]", "expected an object"),
        ("{not json", "is not JSON"),
    ],
)
def test_invalid_configuration_names_the_field(raw: object, names: str) -> None:
    with pytest.raises(GuardrailsConfigError, match="invalid guardrails configuration") as e:
        parse_config(raw)  # type: ignore[arg-type]
    assert names in str(e.value)


def test_every_error_is_reported_at_once() -> None:
    with pytest.raises(GuardrailsConfigError) as e:
        parse_config({"mode": "x", "warmupSteps": 1})
    assert "guardrails.mode" in str(e.value) and "guardrails.warmupSteps" in str(e.value)


def test_the_driver_passes_a_valid_configuration_to_every_worker_and_refuses_a_bad_one() -> None:
    good = '{"mode": "act"}'
    assert worker_env(GrpoSettings(), {"GRPO_GUARDRAILS": good})["GRPO_GUARDRAILS"] == good
    assert "GRPO_GUARDRAILS" not in worker_env(GrpoSettings(), {})
    with pytest.raises(GrpoConfigError, match=r"guardrails\.warmupSteps"):
        worker_env(GrpoSettings(), {"GRPO_GUARDRAILS": '{"warmupSteps": 5}'})
