"""The ConfigMap ``<job>-verl`` holding verl.yaml (mounted at /etc/grpo/verl.yaml)."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.common import DIGEST_ANNOTATION, content_digest, metadata
from grpo_operator.render.verl_config import SizedKnobs, render_verl_config


def render_configmap(spec: GRPOJobSpec, plan: Plan, sized: SizedKnobs | None = None) -> dict[str, Any]:
    """`sized`: what the preflight sized, once it passed (the preflight itself reads the unsized file)."""
    text = render_verl_config(spec, plan, sized)
    meta = metadata(plan, plan.names.configmap, "config")
    meta["annotations"] = {DIGEST_ANNOTATION: content_digest(text)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        # Never updated once training has started: a retry must resume with the configuration the
        # checkpoints were written with. Before that (an edit after a failed preflight) the operator
        # replaces it whole when its digest differs.
        "immutable": True,
        "data": {plan.mounts.config_key: text},
    }
