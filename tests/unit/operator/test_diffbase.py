"""The operator runs without kopf's diff-base, which is safe only while no handler needs one."""

from __future__ import annotations

import grpo_operator.reconcile  # noqa: F401  registers the operator's handlers
import kopf
import pytest
from grpo_operator.runtime.diffbase import NoDiffBaseStorage, check_unused, handlers_needing_a_diff_base


def test_the_operators_handlers_need_no_diff_base() -> None:
    assert handlers_needing_a_diff_base(kopf.get_default_registry()) == []
    check_unused(kopf.get_default_registry())


def test_a_changing_handler_is_refused_with_the_fix() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.update("grpo.dev", "v1alpha1", "grpojobs", registry=registry)
    def edited(**_: object) -> None: ...

    with pytest.raises(RuntimeError, match="AnnotationsDiffBaseStorage"):
        check_unused(registry)


def test_the_essence_is_empty_and_nothing_is_stored() -> None:
    storage = NoDiffBaseStorage()
    body = kopf.Body({"metadata": {"name": "a", "annotations": {}}, "spec": {"x": 1}, "status": {"y": 2}})
    patch = kopf.Patch()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch
