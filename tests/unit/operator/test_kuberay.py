"""The KubeRay floor: the RayJob fields the operator needs, judged on a CRD schema and on a strict refusal."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from grpo_operator import kuberay, metrics
from grpo_operator.reconcile.compat import KubeRayCompat
from grpo_operator.runtime.kube import ApiError

CHART_FILE = Path(__file__).resolve().parents[3] / "charts" / "grpo-operator" / "files" / "kuberay-required-fields.yaml"


def _node(path: tuple[str, ...]) -> dict[str, Any]:
    """The smallest schema holding `path`."""
    if not path:
        return {"type": "string"}
    head, rest = path[0], path[1:]
    if head == kuberay.ITEMS:
        return {"type": "array", "items": _node(rest)}
    return {"type": "object", "properties": {head: _node(rest)}}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(a)
    for key, value in b.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def crd(without: tuple[str, ...] = ()) -> dict[str, Any]:
    """A RayJob CRD serving ray.io/v1 with every required field but those whose dotted path is in `without`."""
    schema: dict[str, Any] = {"type": "object"}
    for field in kuberay.REQUIRED_FIELDS:
        if field.dotted not in without:
            schema = _merge(schema, _node(field.path))
    return {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": {}}},
                                  {"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}


WORKER_RESOURCES = "spec.rayClusterSpec.workerGroupSpecs[].resources"


def test_the_floor_is_the_release_that_added_worker_group_resources() -> None:
    assert kuberay.FLOOR == "1.5.0"
    assert kuberay.missing_fields(crd()) == []
    (missing,) = kuberay.missing_fields(crd(without=(WORKER_RESOURCES,)))
    assert (missing.dotted, missing.since) == (WORKER_RESOURCES, "1.5.0")


def test_a_kuberay_1_4_crd_is_refused_naming_the_version_and_the_fix() -> None:
    message = kuberay.unsupported(kuberay.missing_fields(crd(without=(WORKER_RESOURCES,))))
    assert f"lacks {WORKER_RESOURCES} (KubeRay >= 1.5.0:" in message
    assert "Install KubeRay v1.5.0 or later" in message
    assert "config/crd?ref=v1.5.0" in message  # Helm does not upgrade CRDs


def test_a_crd_without_v1_lacks_everything() -> None:
    old = {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": {}}}]}}
    assert kuberay.missing_fields(old) == list(kuberay.REQUIRED_FIELDS)


def test_a_strict_refusal_is_mapped_to_the_field_and_version() -> None:
    refused = ('RayJob in version "v1" cannot be handled as a RayJob: strict decoding error: '
               'unknown field "spec.rayClusterSpec.workerGroupSpecs[0].resources", '
               'unknown field "spec.rayClusterSpec.workerGroupSpecs[1].resources"')
    assert kuberay.unknown_fields(refused) == [WORKER_RESOURCES, WORKER_RESOURCES]
    message = kuberay.refusal_of(refused)
    assert message is not None and "KubeRay >= 1.5.0" in message
    other = kuberay.refusal_of('strict decoding error: unknown field "spec.newThing"')
    assert other is not None and "spec.newThing" in other
    assert kuberay.refusal_of("admission webhook denied the request") is None


def test_the_charts_copy_is_generated() -> None:
    assert CHART_FILE.read_text() == kuberay.chart_file(), (
        "charts/grpo-operator/files/kuberay-required-fields.yaml is stale: "
        "run `python -m grpo_operator.kuberay > charts/grpo-operator/files/kuberay-required-fields.yaml`")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_compatible_is_read_once() -> None:
    reads: list[int] = []

    async def read() -> dict[str, Any]:
        reads.append(1)
        return crd()

    compat = KubeRayCompat(30, read)

    async def twice() -> list[str | None]:
        return [await compat.problem(), await compat.problem()]

    assert asyncio.run(twice()) == [None, None]
    assert len(reads) == 1
    assert metrics.KUBERAY_COMPATIBLE._value.get() == 1


def test_a_problem_is_remembered_then_read_again() -> None:
    answers = [crd(without=(WORKER_RESOURCES,)), crd()]
    clock = _Clock()

    async def read() -> dict[str, Any]:
        return answers.pop(0)

    compat = KubeRayCompat(30, read, clock)
    first = asyncio.run(compat.problem())
    assert first is not None and "1.5.0" in first
    clock.now = 10
    assert asyncio.run(compat.problem()) == first  # within recheck_seconds: not read again
    assert len(answers) == 1
    clock.now = 31
    assert asyncio.run(compat.problem()) is None  # KubeRay was upgraded meanwhile
    assert answers == []


def test_not_installed_says_so() -> None:
    async def read() -> None:
        return None

    assert asyncio.run(KubeRayCompat(30, read).problem()) == kuberay.NOT_INSTALLED


def test_an_unreadable_crd_leaves_the_check_to_strict_creation() -> None:
    reads: list[int] = []
    clock = _Clock()

    async def forbidden() -> None:
        reads.append(1)
        raise ApiError(403, "Forbidden", "cannot get customresourcedefinitions")

    compat = KubeRayCompat(30, forbidden, clock)
    assert asyncio.run(compat.problem()) is None
    compat.refused("a strict create was refused")
    assert asyncio.run(compat.problem()) == "a strict create was refused"
    clock.now = 31
    assert asyncio.run(compat.problem()) is None  # the next creation tries again
    assert len(reads) == 1  # never read again once forbidden


def test_other_api_errors_are_not_swallowed() -> None:
    async def broken() -> None:
        raise ApiError(500, "InternalError", "etcd is down")

    with pytest.raises(ApiError):
        asyncio.run(KubeRayCompat(30, broken).problem())


def test_a_single_namespace_operator_never_reads_the_crd() -> None:
    async def read() -> dict[str, Any]:
        raise AssertionError("read the CRD without cluster-wide rights")

    compat = KubeRayCompat(30, read, readable=False)
    assert asyncio.run(compat.problem()) is None
    assert not compat.compatible


def crd_with_auth_options(has: bool) -> dict[str, Any]:
    base = crd()
    if has:
        schema = base["spec"]["versions"][1]["schema"]["openAPIV3Schema"]
        base["spec"]["versions"][1]["schema"]["openAPIV3Schema"] = _merge(schema, _node(kuberay.AUTH_OPTIONS.path))
    return base


def test_token_auth_needs_the_release_with_auth_options() -> None:
    assert kuberay.AUTH_OPTIONS.since == "1.5.1"
    assert kuberay.serves_auth_options(crd_with_auth_options(True))
    assert not kuberay.serves_auth_options(crd_with_auth_options(False))
    # It is not a floor for every job: a KubeRay 1.5.0 still runs jobs with rayAuth: disabled.
    assert kuberay.missing_fields(crd_with_auth_options(False)) == []


def test_a_token_job_on_kuberay_1_5_0_is_refused_and_a_disabled_one_is_not() -> None:
    async def read() -> dict[str, Any]:
        return crd_with_auth_options(False)

    compat = KubeRayCompat(30, read)

    async def judge() -> tuple[str | None, str | None, str | None]:
        return await compat.problem(), await compat.job_problem("token"), await compat.job_problem("disabled")

    whole, token, disabled = asyncio.run(judge())
    assert whole is None and disabled is None
    assert token == kuberay.TOKEN_AUTH_UNSUPPORTED
    assert "spec.security.rayAuth" in token and "KubeRay v1.5.1 or later" in token
    assert "spec.security.rayAuth: disabled" in token  # the other fix


def test_an_upgraded_kuberay_is_seen_without_a_restart() -> None:
    crds = [crd_with_auth_options(False), crd_with_auth_options(True)]
    now = [0.0]

    async def read() -> dict[str, Any]:
        return crds.pop(0) if len(crds) > 1 else crds[0]

    compat = KubeRayCompat(30, read, lambda: now[0])
    assert asyncio.run(compat.problem()) is None
    assert asyncio.run(compat.job_problem("token")) == kuberay.TOKEN_AUTH_UNSUPPORTED
    now[0] = 31.0
    assert asyncio.run(compat.job_problem("token")) is None


def test_a_strict_refusal_of_auth_options_refuses_token_jobs_only() -> None:
    message = ('RayJob.ray.io "j" is invalid: strict decoding error: unknown field '
               '"spec.rayClusterSpec.authOptions"')
    refusal = kuberay.KubeRayUnsupported(kuberay.refusal_of(message) or "")
    assert refusal.message == kuberay.TOKEN_AUTH_UNSUPPORTED
    assert not refusal.whole_cluster

    async def unreadable() -> dict[str, Any]:
        raise AssertionError("a single-namespace operator never reads the CRD")

    now = [0.0]
    compat = KubeRayCompat(30, unreadable, lambda: now[0], readable=False)
    assert asyncio.run(compat.job_problem("token")) is None  # unknown: the strict create is the check
    compat.unsupported(refusal)
    assert asyncio.run(compat.problem()) is None  # other jobs still run
    assert asyncio.run(compat.job_problem("token")) == kuberay.TOKEN_AUTH_UNSUPPORTED
    now[0] = 31.0  # the refusal is remembered for recheck_seconds, then the next strict create checks again
    assert asyncio.run(compat.job_problem("token")) is None
    whole = kuberay.KubeRayUnsupported(kuberay.refusal_of(message.replace("authOptions", "backoffLimit")) or "")
    assert whole.whole_cluster
