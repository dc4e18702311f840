"""Pure builders of a GRPOJob's children: each takes (spec, plan) and returns a plain dict/str.

One file per child with its test beside it in tests/unit/operator/. Builders set labels but never
owner references: the handlers adopt what they create (kopf.adopt) and decide what to own.
"""

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.configmap import render_configmap
from grpo_operator.render.export_job import render_export_job
from grpo_operator.render.network_policy import NetworkPeers, render_network_policy
from grpo_operator.render.preflight_job import render_preflight_job
from grpo_operator.render.pvc import render_checkpoint_pvc
from grpo_operator.render.rayjob import render_rayjob
from grpo_operator.render.rbac import render_trainer_rbac
from grpo_operator.render.verl_config import render_verl_config, verl_config

__all__ = [
    "NetworkPeers",
    "render_checkpoint_pvc",
    "render_children",
    "render_configmap",
    "render_export_job",
    "render_network_policy",
    "render_preflight_job",
    "render_rayjob",
    "render_trainer_rbac",
    "render_verl_config",
    "verl_config",
]


def render_children(
    spec: GRPOJobSpec, plan: Plan, *, network_policy: NetworkPeers | None = None
) -> list[dict[str, Any]]:
    """Every child of a starting GRPOJob, in the order to create them; the NetworkPolicy only when
    `network_policy` says whom it admits (the operator's setting).

    The RayJob comes last: its pods need the ServiceAccount (the apiserver refuses pods naming a
    missing one, and KubeRay only retries with backoff), the ConfigMap and the checkpoint PVC, and
    the NetworkPolicy should hold before the first Ray pod listens.
    The preflight Job (which needs the same) and the export Job are not here: the operator creates the
    preflight before the RayJob, and the converter after training succeeds.
    """
    pvc = render_checkpoint_pvc(spec, plan)
    return [
        *render_trainer_rbac(spec, plan),
        render_configmap(spec, plan),
        *([pvc] if pvc is not None else []),
        *([render_network_policy(plan, network_policy)] if network_policy is not None else []),
        render_rayjob(spec, plan),
    ]
