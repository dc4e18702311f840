"""`helm test`'s install check: the operator's /metrics, read over HTTP, says whether the install works."""

from __future__ import annotations

import socket

import pytest
from grpo_operator.selftest import main, problems
from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest, start_http_server


def _metrics(version: str = "0.1.0", compatible: float | None = 1) -> CollectorRegistry:
    """The series the check reads, made by prometheus_client as the operator makes them (metrics.py)."""
    registry = CollectorRegistry()
    Info("grpo_operator_build", "Version of the running operator.", registry=registry).info({"version": version})
    if compatible is not None:
        Gauge("grpo_operator_kuberay_compatible", "KubeRay usable.", registry=registry).set(compatible)
    return registry


def _text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_a_working_install_has_no_problems() -> None:
    assert problems(_text(_metrics()), "0.1.0") == []
    # Single-namespace installs cannot read the CRD: unknown is not a failure.
    assert problems(_text(_metrics(compatible=None)), "0.1.0") == []


def test_an_old_image_and_an_unusable_kuberay_are_named_with_the_fix() -> None:
    found = problems(_text(_metrics(version="0.0.9", compatible=0)), "0.1.0")
    assert len(found) == 2
    assert "runs version 0.0.9, the chart installs 0.1.0" in found[0]
    assert "KubeRay unusable" in found[1] and "kubectl logs" in found[1]


def test_something_else_on_the_port_is_not_taken_for_the_operator() -> None:
    (found,) = problems("# HELP up Up.\n# TYPE up gauge\nup 1\n", "0.1.0")
    assert "not grpo-operator's /metrics" in found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("compatible", "code"), [(1, 0), (0, 1)])
def test_main_reads_a_live_endpoint(compatible: float, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=_metrics(compatible=compatible))
    try:
        assert main([f"--metrics-url=http://127.0.0.1:{port}/metrics", "--version=0.1.0", "--wait=5"]) == code
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    out = capsys.readouterr().out
    assert ("ok: grpo-operator 0.1.0" in out) is (code == 0)


def test_main_says_when_nothing_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"--metrics-url=http://127.0.0.1:{_free_port()}/metrics", "--version=0.1.0", "--wait=0"]) == 1
    assert "does not answer" in capsys.readouterr().out
