"""The apiserver filters the child watches by label: a child whose labels miss the selector would
never reach its handler, and a selector stricter than the handler's filter would hide events."""

from __future__ import annotations

import kopf
import pytest
from grpo_operator.reconcile.mirror import _CHILD_SELECTOR
from grpo_operator.reconcile.startup import WATCH_SELECTORS
from grpo_operator.render import render_children, render_export_job
from grpo_operator.render.common import COMPONENT_LABEL
from grpojob_fixtures import example_body, plan_of, spec_with


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (`k=v`) and existence (`k`) terms, the two forms WATCH_SELECTORS uses."""
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


def as_selector(filters: dict[str, object]) -> str:
    return ",".join(k if v is kopf.PRESENT else f"{k}={v}" for k, v in filters.items())


def test_selectors_are_the_handlers_label_filters() -> None:
    assert WATCH_SELECTORS[("ray.io", "rayjobs")] == as_selector(_CHILD_SELECTOR)
    assert WATCH_SELECTORS[("batch", "jobs")] == as_selector({**_CHILD_SELECTOR, COMPONENT_LABEL: "export"})


@pytest.mark.parametrize("example", ["reference-disaggregated", "colocated-length"])
def test_rendered_rayjob_passes_the_selector(example: str) -> None:
    spec = spec_with(example_body(example))
    job_plan = plan_of(spec)
    rayjobs = [c for c in render_children(spec, job_plan) if c["kind"] == "RayJob"]
    assert len(rayjobs) == 1
    assert matches(WATCH_SELECTORS[("ray.io", "rayjobs")], rayjobs[0]["metadata"]["labels"])


def test_rendered_converter_job_passes_the_selector() -> None:
    spec = spec_with(example_body("reference-disaggregated"))  # the example that exports
    export = render_export_job(spec, plan_of(spec), 10)
    assert matches(WATCH_SELECTORS[("batch", "jobs")], export["metadata"]["labels"])
