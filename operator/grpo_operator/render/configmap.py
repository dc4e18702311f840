"""The ConfigMap ``<job>-verl`` holding verl.yaml (mounted at /etc/grpo/verl.yaml)."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.common import metadata
from grpo_operator.render.verl_config import render_verl_config


def render_configmap(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(plan, plan.names.configmap, "config"),
        # Rendered once when the job is created and never updated: the spec is immutable, and a
        # retry must resume with the configuration the checkpoints were written with.
        "immutable": True,
        "data": {plan.mounts.config_key: render_verl_config(spec, plan)},
    }
