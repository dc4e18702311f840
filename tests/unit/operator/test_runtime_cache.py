"""The operator's knowledge of GRPORuntimes (reconcile/runtimes.py): the runtime a job takes from the cache, and what
a failed first list means. The watch against a real apiserver is tests/e2e/test_runtimes.py's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from grpo_operator.reconcile.runtimes import RuntimeCache, _RuntimeWatch, take_runtime
from grpo_operator.runtime.kube import ApiError
from grpo_operator.runtimes import UNLISTED_RUNTIME_REASON, RuntimeProblem
from grpojob_fixtures import example_body


def _runtime(name: str, uid: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "generation": 2}, "spec": spec}


def _job(**spec: Any) -> dict[str, Any]:
    body = example_body("colocated-length")
    return {**body, "spec": {**body["spec"], **spec}, "status": {"phase": "Invalid", "runtime": {"name": "old"}}}


def test_a_job_takes_the_default_runtime_from_the_cache_with_its_uid_and_sources() -> None:
    cache = RuntimeCache()
    cache.on_event("ADDED", _runtime("gke", "u-1", default=True, image="registry.example.com/t:1"))
    cache.listed.set()
    job, spec = asyncio.run(take_runtime(_job(), cache))
    taken = job["status"]["runtime"]
    assert (taken["name"], taken["uid"], taken["generation"]) == ("gke", "u-1", 2)
    assert spec.image == "registry.example.com/t:1"  # the effective spec, merged once
    assert taken["fromRuntime"] == ["image"] and taken["spec"]["image"] == "registry.example.com/t:1"
    cache.on_event("DELETED", _runtime("gke", "u-1"))
    job, spec = asyncio.run(take_runtime(_job(), cache))
    assert job["status"]["runtime"] is None and spec.image is None  # the old one is cleared


def test_a_job_is_not_judged_before_the_first_list() -> None:
    with pytest.raises(RuntimeProblem) as waiting:
        asyncio.run(take_runtime(_job(), RuntimeCache(), first_list_seconds=0.01))
    assert waiting.value.reason == UNLISTED_RUNTIME_REASON


class _Refusing:
    def __init__(self, status: int) -> None:
        self.status = status

    async def request(self, *_: Any, **__: Any) -> Any:
        raise ApiError(self.status, "Refused", "no")


@pytest.mark.parametrize(("status", "listed"), [(503, False), (429, False), (404, True), (403, True)])
def test_only_a_refusal_that_means_no_runtimes_for_us_counts_as_the_first_list(status: int, listed: bool) -> None:
    cache = RuntimeCache()
    cache.on_event("ADDED", _runtime("gke", "u-1", default=True))
    watch = _RuntimeWatch(_Refusing(status), "/apis/grpo.dev/v1alpha1/grporuntimes", "",  # type: ignore[arg-type]
                          cache.on_event)
    watch.cache = cache
    with pytest.raises(ApiError):
        asyncio.run(watch.relist())
    assert cache.listed.is_set() is listed
    # A 5xx keeps what was known; no CRD or no right to list: nothing is known any more.
    assert bool(cache.by_name) is not listed
