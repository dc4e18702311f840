"""The installed GRPOJob CRD against the running operator's version: the judgement, and the read through the
operator's own API client against a fake apiserver (a refusal in single-namespace mode is no problem)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from grpo_operator import __version__
from grpo_operator.crd import VERSION_LABEL, build_crd
from grpo_operator.crd_check import APPLY_CRDS, crd_mismatch, grpojob_crd_problem
from grpo_operator.runtime import kube
from test_kube_client import operator_client, status

CHART_CRD = Path(__file__).resolve().parents[3] / "charts" / "grpo-operator" / "crds" / "grpojob.yaml"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/grpojobs.grpo.dev"


def crd_of(version: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "grpo-operator"} | ({VERSION_LABEL: version} if version else {})
    return {"metadata": {"name": "grpojobs.grpo.dev", "labels": labels}}


def test_the_generated_and_the_shipped_crd_match_this_operator() -> None:
    assert crd_mismatch(build_crd(), __version__) is None
    # The chart's copy is what Helm installs and what the apiserver then answers with.
    assert crd_mismatch(yaml.safe_load(CHART_CRD.read_text()), __version__) is None


def test_an_older_crd_names_both_versions_and_the_apply_command() -> None:
    problem = crd_mismatch(crd_of("0.0.9"), "0.1.0")
    assert problem is not None
    assert "is version 0.0.9 but this operator is 0.1.0" in problem
    assert APPLY_CRDS in problem and "Helm never upgrades CRDs" in problem


def test_a_crd_without_the_version_label_says_so() -> None:
    problem = crd_mismatch(crd_of(None), "0.1.0")
    assert problem is not None
    assert f"has no {VERSION_LABEL} label" in problem and "this operator is 0.1.0" in problem
    assert APPLY_CRDS in problem


def test_a_missing_crd_says_it_is_not_installed() -> None:
    problem = crd_mismatch(None, "0.1.0")
    assert problem is not None
    assert "is not installed" in problem and "0.1.0" in problem and APPLY_CRDS in problem


def test_a_newer_crd_asks_for_the_operator_not_for_the_older_crd() -> None:
    problem = crd_mismatch(crd_of("0.2.0"), "0.1.0")
    assert problem is not None
    assert "newer than this operator (0.1.0)" in problem and "upgrade the operator to 0.2.0" in problem
    assert APPLY_CRDS not in problem


def test_versions_are_compared_as_numbers_not_text() -> None:
    # As text "0.10.0" < "0.9.0": the newer CRD would be "fixed" by applying the older one.
    assert "upgrade the operator to 0.10.0" in (crd_mismatch(crd_of("0.10.0"), "0.9.0") or "")
    assert APPLY_CRDS in (crd_mismatch(crd_of("0.9.0"), "0.10.0") or "")


def test_an_unparsable_installed_version_is_a_mismatch_with_the_apply_command() -> None:
    assert APPLY_CRDS in (crd_mismatch(crd_of("dev"), "0.1.0") or "")


@pytest.mark.parametrize("crd", [None, crd_of(None), crd_of("0.0.9"), crd_of("0.2.0")],
                         ids=["absent", "unlabelled", "older", "newer"])
def test_each_problem_is_one_sentence(crd: dict[str, Any] | None) -> None:
    problem = crd_mismatch(crd, "0.1.0")
    assert problem is not None
    assert problem[0].isupper() and problem.endswith(".") and ". " not in problem


def _answering(code: int, body: dict[str, Any] | None = None) -> tuple[list[str], Any]:
    asked: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        asked.append(request.path)
        if body is not None:
            return web.json_response(body)
        return status(code, {403: "Forbidden", 404: "NotFound", 400: "BadRequest"}[code], "answer")

    return asked, handler


def _problem_from(handler: Any) -> str | None:
    async def scenario() -> str | None:
        async with operator_client(handler):
            return await grpojob_crd_problem("0.1.0")

    return asyncio.run(scenario())


def test_the_installed_crd_is_read_by_name_and_judged() -> None:
    asked, handler = _answering(200, crd_of("0.0.9"))
    assert "is version 0.0.9" in (_problem_from(handler) or "")
    assert asked == [CRD_PATH]


def test_no_crd_on_the_apiserver_is_reported_as_not_installed() -> None:
    _, handler = _answering(404)
    assert "is not installed" in (_problem_from(handler) or "")


def test_a_forbidden_read_is_no_problem_and_leaves_a_note(caplog: pytest.LogCaptureFixture) -> None:
    # The chart's single-namespace mode grants nothing cluster-wide: its operator must still become ready.
    _, handler = _answering(403)
    with caplog.at_level(logging.INFO, logger="grpo_operator.crd_check"):
        assert _problem_from(handler) is None
    assert "cannot read the CRD grpojobs.grpo.dev (Forbidden)" in caplog.text


def test_other_api_errors_are_not_swallowed() -> None:
    _, handler = _answering(400)
    with pytest.raises(kube.ApiError) as raised:
        _problem_from(handler)
    assert raised.value.status == 400


def test_an_operator_that_may_not_read_crds_does_not_ask() -> None:
    # Single-namespace mode: a request known to be refused would only put a Forbidden in the operator's log.
    asked: list[str] = []

    async def read() -> dict[str, Any]:
        asked.append("crd")
        return crd_of("0.0.9")

    assert asyncio.run(grpojob_crd_problem("0.1.0", read, readable=False)) is None
    assert asked == []
