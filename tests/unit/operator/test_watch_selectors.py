"""The apiserver filters the child watches by label: a child whose labels miss the selector would
never reach its handler, and a selector stricter than the handler's filter would hide events."""

from __future__ import annotations

import kopf
import pytest
from grpo_operator.reconcile.handlers import preflight_job_event
from grpo_operator.reconcile.mirror import _CHILD_SELECTOR
from grpo_operator.reconcile.startup import WATCH_SELECTORS
from grpo_operator.render import render_children, render_export_job, render_preflight_job
from grpo_operator.render.common import COMPONENT_LABEL
from grpojob_fixtures import example_body, plan_of, spec_with


def _terms(selector: str) -> list[str]:
    """Split on the commas between terms, not those inside a set-based term's parentheses."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [*terms, current]


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (`k=v`), existence (`k`) and set (`k in (a,b)`) terms, the forms WATCH_SELECTORS uses."""
    for term in _terms(selector):
        if " in (" in term:
            key, values = term.split(" in (")
            if labels.get(key) not in values.rstrip(")").split(","):
                return False
            continue
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


def as_selector(filters: dict[str, object]) -> str:
    return ",".join(k if v is kopf.PRESENT else f"{k}={v}" for k, v in filters.items())


def _handler_labels(handler: object) -> dict[str, object]:
    registry = kopf.get_default_registry()
    found = [h for h in registry._watching.get_all_handlers() if h.fn is handler]
    assert len(found) == 1
    return dict(found[0].labels or {})


def test_selectors_are_the_handlers_label_filters() -> None:
    assert WATCH_SELECTORS[("ray.io", "rayjobs")] == as_selector(_CHILD_SELECTOR)
    components = {_handler_labels(preflight_job_event)[COMPONENT_LABEL], "export"}
    jobs = as_selector(_CHILD_SELECTOR) + f",{COMPONENT_LABEL} in ({','.join(sorted(components))})"
    assert WATCH_SELECTORS[("batch", "jobs")] == jobs


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


def test_rendered_preflight_job_passes_the_selector() -> None:
    spec = spec_with(example_body("colocated-length"))
    preflight = render_preflight_job(spec, plan_of(spec), {})
    assert matches(WATCH_SELECTORS[("batch", "jobs")], preflight["metadata"]["labels"])
    assert not matches(WATCH_SELECTORS[("batch", "jobs")], {**preflight["metadata"]["labels"], COMPONENT_LABEL: "x"})
