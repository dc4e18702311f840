"""Operator settings from GRPO_OPERATOR_* variables: defaults, overrides, and a bad value named."""

from __future__ import annotations

import pytest
from grpo_operator.settings import OperatorSettings


def test_defaults_without_environment() -> None:
    settings = OperatorSettings.from_env({})
    assert settings == OperatorSettings()
    assert settings.max_jobs_in_flight == 64 and settings.error_retry_seconds == 15.0
    # The production timers (the e2e tests run with seconds instead: operator_runner.TEST_TIMERS).
    assert (settings.dependency_retry_seconds, settings.storage_check_seconds) == (30.0, 20.0)
    assert settings.claim_provisioning_grace_seconds == 120.0


def test_the_timers_the_e2e_tests_shorten_are_read_from_the_environment() -> None:
    from grpo_devcluster.operator_runner import TEST_TIMERS

    settings = OperatorSettings.from_env(TEST_TIMERS)
    assert (settings.dependency_retry_seconds, settings.storage_check_seconds, settings.error_retry_seconds,
            settings.claim_provisioning_grace_seconds) == (2.0, 2.0, 2.0, 2.0)


def test_tuning_variables_override_the_defaults() -> None:
    settings = OperatorSettings.from_env({
        "GRPO_OPERATOR_MAX_JOBS_IN_FLIGHT": "8",
        "GRPO_OPERATOR_ERROR_RETRY_SECONDS": "2.5",
        "GRPO_OPERATOR_MAX_CONNECTIONS": "16",
        "GRPO_OPERATOR_NAMESPACES": "team-a, team-b,",
        "GRPO_OPERATOR_DRIVER_FLOOR": "0",
        "GRPO_OPERATOR_AUTOSCALING": "always",
        "GRPO_OPERATOR_TLS_READ_BUFFER_BYTES": "0",
    })
    assert (settings.max_jobs_in_flight, settings.error_retry_seconds, settings.max_connections) == (8, 2.5, 16)
    assert settings.tls_read_buffer_bytes == 0 and OperatorSettings.from_env({}).tls_read_buffer_bytes == 64 * 1024
    assert settings.driver_floor == 0 and OperatorSettings.from_env({}).driver_floor == 580
    assert settings.autoscaling == "always" and OperatorSettings.from_env({}).autoscaling == "auto"
    assert settings.namespaces == ("team-a", "team-b")


def test_a_bad_value_stops_the_operator_with_the_variable_family_named() -> None:
    with pytest.raises(SystemExit, match="GRPO_OPERATOR_"):
        OperatorSettings.from_env({"GRPO_OPERATOR_MAX_JOBS_IN_FLIGHT": "many"})
    with pytest.raises(SystemExit, match="GRPO_OPERATOR_AUTOSCALING='sometimes': expected auto, always or never"):
        OperatorSettings.from_env({"GRPO_OPERATOR_AUTOSCALING": "sometimes"})
    for tiny in ("4096", "-1"):
        refusal = f"GRPO_OPERATOR_TLS_READ_BUFFER_BYTES='{tiny}': expected 0 .* or at least 16384"
        with pytest.raises(SystemExit, match=refusal):
            OperatorSettings.from_env({"GRPO_OPERATOR_TLS_READ_BUFFER_BYTES": tiny})
