"""What a GRPOJob event asks of the operator: decided from the object, and edits told field by field."""

from __future__ import annotations

import pytest
from grpo_operator.reconcile.lifecycle import Action, edited_fields, next_action, spec_digests


def job(phase: str | None = None, generation: int = 1, observed: int | None = 1) -> dict:
    status = {} if phase is None else {"phase": phase, "observedGeneration": observed}
    return {"metadata": {"generation": generation}, "spec": {"model": {"path": "m"}}, "status": status}


def test_a_job_without_phase_gets_its_children_created() -> None:
    assert next_action(job(), listing=False) is Action.CREATE
    assert next_action({"metadata": {"generation": 1}, "spec": {}}, listing=True) is Action.CREATE


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_job_is_left_alone_even_after_an_edit_or_a_restart(phase: str) -> None:
    assert next_action(job(phase, generation=3, observed=1), listing=True) is Action.NONE


def test_our_own_status_write_asks_for_nothing() -> None:
    assert next_action(job("Pending"), listing=False) is Action.NONE
    assert next_action(job("Invalid"), listing=False) is Action.NONE


def test_an_edit_of_a_running_job_is_applied_once() -> None:
    assert next_action(job("Running", generation=2, observed=1), listing=False) is Action.APPLY_EDIT
    assert next_action(job("Running", generation=2, observed=2), listing=False) is Action.NONE


def test_a_refused_job_is_tried_again_when_edited_or_after_a_restart() -> None:
    assert next_action(job("Invalid", generation=2, observed=1), listing=False) is Action.CREATE
    assert next_action(job("Invalid"), listing=True) is Action.CREATE


def test_a_job_in_preflight_is_rendered_again_when_edited_or_after_a_restart() -> None:
    assert next_action(job("Preflight"), listing=False) is Action.NONE  # the Job's events drive it
    assert next_action(job("Preflight", generation=2, observed=1), listing=False) is Action.CREATE
    assert next_action(job("Preflight"), listing=True) is Action.CREATE


def test_a_listed_job_is_resynced() -> None:
    assert next_action(job("Running"), listing=True) is Action.RESYNC


def test_digests_tell_the_edited_fields_and_scheduling_by_subfield() -> None:
    spec = {"model": {"path": "m"}, "verl": {"a": 1}, "scheduling": {"suspend": False, "retries": 2}}
    before = spec_digests(spec)
    assert sorted(before) == ["spec.model", "spec.scheduling.retries", "spec.scheduling.suspend", "spec.verl"]
    after = spec_digests({**spec, "verl": {"a": 2}, "scheduling": {"suspend": True, "retries": 2}})
    assert edited_fields(before, after) == ["spec.scheduling.suspend", "spec.verl"]
    assert edited_fields(before, spec_digests(spec)) == []


def test_digests_do_not_depend_on_key_order_and_see_added_and_removed_fields() -> None:
    a = spec_digests({"verl": {"x": 1, "y": 2}})
    assert a == spec_digests({"verl": {"y": 2, "x": 1}})
    assert edited_fields(a, {**a, "spec.image": "0"}) == ["spec.image"]
    assert edited_fields({**a, "spec.image": "0"}, a) == ["spec.image"]


def test_a_field_the_crd_gained_with_its_default_is_no_edit_of_an_older_job() -> None:
    started = spec_digests({"image": "trainer:1"})  # recorded before the CRD had spec.security
    defaulted = spec_digests({"image": "trainer:1", "security": {"rayAuth": "token"}})
    defaults = spec_digests({"security": {"rayAuth": "token"}})
    assert edited_fields(started, defaulted, defaults) == []
    # Set to anything but the default, it is an edit like any other.
    changed = spec_digests({"image": "trainer:1", "security": {"rayAuth": "disabled"}})
    assert edited_fields(started, changed, defaults) == ["spec.security"]
    assert edited_fields(defaulted, changed, defaults) == ["spec.security"]
