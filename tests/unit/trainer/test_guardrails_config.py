"""spec.guardrails (GRPO_GUARDRAILS) is validated at the edge: every error names its field."""

from __future__ import annotations

import pytest
from grpo_trainer.config import worker_env
from grpo_trainer.errors import GrpoConfigError
from grpo_trainer.guardrails import GuardrailsConfigError, config_from_env, parse_config
from grpo_trainer.guardrails.config import acts, attempt_from_env, detector_mode, protection_horizon
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
        ({"holdSeconds": 59}, "guardrails.holdSeconds: Input should be greater than or equal to 60"),
        ({"hold_seconds": 86_401}, "guardrails.hold_seconds: Input should be less than or equal to 86400"),
        ({"detectors": {"gradSpike": {"mode": "fix"}}}, "guardrails.detectors.gradSpike.mode"),
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


def test_hold_seconds_defaults_to_15_minutes_and_takes_its_bounds() -> None:
    assert parse_config(None).hold_seconds == 900
    assert parse_config({"holdSeconds": 60}).hold_seconds == 60
    assert parse_config({"hold_seconds": 86_400}).hold_seconds == 86_400


def test_a_detector_without_its_own_mode_follows_the_jobs() -> None:
    config = parse_config({"mode": "observe", "detectors": {"nonFinite": {"mode": "act"}}})
    assert detector_mode(config, "non_finite") == "act"
    assert detector_mode(config, "kl_runaway") == "observe"
    acting = parse_config({"mode": "act", "detectors": {"grad_spike": {"mode": "observe"}}})
    assert (detector_mode(acting, "grad_spike"), detector_mode(acting, "policy_collapse")) == ("observe", "act")


def test_nothing_acts_in_observe_mode_and_nothing_needs_protecting() -> None:
    config = parse_config({"mode": "observe"})
    assert not acts(config)
    assert protection_horizon(config) == 0


def test_act_mode_protects_the_widest_reach_of_the_detectors_that_act() -> None:
    assert acts(parse_config({"mode": "act"}))
    # policy_collapse: its 5-of-8 window and the 10-step slope window before it (the entropy fall)
    assert protection_horizon(parse_config({"mode": "act"})) == 18
    assert protection_horizon(parse_config({"mode": "act", "detectors": {"policyCollapse": {"slopeWindow": 5}}})) == 13
    narrower = {"mode": "act", "detectors": {"policyCollapse": {"mode": "observe"}, "klRunaway": {"k": 2, "m": 7}}}
    assert protection_horizon(parse_config(narrower)) == 7


def test_non_finite_alone_protects_one_step_and_disabled_detectors_do_not_count() -> None:
    only_nan = parse_config({"detectors": {"non_finite": {"mode": "act"}}})
    assert acts(only_nan) and protection_horizon(only_nan) == 1
    off = {"mode": "act", "enabled": False}
    disabled = parse_config({"detectors": {"non_finite": off, "grad_spike": off}})
    assert not acts(disabled) and protection_horizon(disabled) == 0


def test_the_attempt_comes_from_the_rollback_environment() -> None:
    assert attempt_from_env({}) == 1
    assert attempt_from_env({"GRPO_ROLLBACK": '{"attempt": 3, "step": 20, "detector": "kl_runaway"}'}) == 3


@pytest.mark.parametrize("raw", ["{nope", '{"attempt": 1}', '{"attempt": "2"}', '{"attempt": true}', "[2]", "{}"])
def test_a_malformed_rollback_attempt_reads_as_1_with_a_warning(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    assert attempt_from_env({"GRPO_ROLLBACK": raw}) == 1
    assert "GRPO_ROLLBACK has no valid attempt" in caplog.text
