"""The preflight's sizing into the verl ConfigMap the RayJob mounts.

The preflight Job (grpo_trainer/preflight/sizing.py) sizes the token budgets and memory knobs the user left empty
for the model, lengths and GPU memory it checked, and says so in its verdict (`sizing`). The ConfigMap it read
holds the operator's fixed defaults for them; once the preflight passed, the operator replaces that ConfigMap
(still unmounted by anything else) with one carrying the sized values, posts a `Sized` Event saying what was chosen
and why, and only then creates the RayJob. A verdict that cannot be read again (its pod gone) leaves the fixed
defaults: the sizing only ever makes a job faster, never a condition of it running.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.reconcile.children import Child
from grpo_operator.render.configmap import render_configmap
from grpo_operator.render.verl_config import SizedKnobs
from grpo_operator.runtime import events, kube


async def sized_knobs(namespace: str, status: Mapping[str, Any]) -> SizedKnobs | None:
    """What the passed preflight of this status sized, read from its Job's pod; None without a passed verdict."""
    preflight = status.get("preflight") or {}
    if preflight.get("passed") is not True or not preflight.get("jobName"):
        return None
    verdict = await kube.job_termination_message(namespace, preflight["jobName"])
    return SizedKnobs.from_verdict((verdict or {}).get("sizing"))


def with_sized_config(children: list[Child], spec: GRPOJobSpec, plan: Plan, sized: SizedKnobs | None) -> list[Child]:
    """The children with the verl ConfigMap rendered with the sized values (replacing the preflight's)."""
    if sized is None:
        return children
    return [Child(render_configmap(spec, plan, sized)), *(c for c in children if c.kind != "ConfigMap")]


def say_sized(job: Mapping[str, Any], created: list[Child], sized: SizedKnobs | None) -> None:
    """The `Sized` Event, once, when the sized ConfigMap replaced the preflight's."""
    if sized is not None and any(c.kind == "ConfigMap" for c in created):
        values = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sized.values)
        events.post(job, type="Normal", reason="Sized", message=f"{sized.summary} ({values})")
