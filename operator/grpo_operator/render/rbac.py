"""The trainer's identity: it may read its own GRPOJob and patch that object's status, nothing else."""

from __future__ import annotations

from typing import Any

from grpo_operator import GROUP, PLURAL
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.common import metadata


def render_trainer_rbac(spec: GRPOJobSpec, plan: Plan) -> list[dict[str, Any]]:
    """[ServiceAccount (only when the operator provides it), Role, RoleBinding].

    A user-given serviceAccountName still gets the Role bound: the trainer reports progress
    through whichever account its pods run as.
    """
    objects: list[dict[str, Any]] = []
    if plan.creates_service_account:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": metadata(plan, plan.service_account, "trainer"),
                "imagePullSecrets": [{"name": s.name} for s in spec.image_pull_secrets or []],
            }
        )
    role_name = plan.names.trainer_role
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(plan, role_name, "trainer"),
            "rules": [
                # resourceNames pins both rules to this one GRPOJob.
                {
                    "apiGroups": [GROUP],
                    "resources": [PLURAL],
                    "resourceNames": [plan.names.job],
                    "verbs": ["get"],
                },
                {
                    "apiGroups": [GROUP],
                    "resources": [f"{PLURAL}/status"],
                    "resourceNames": [plan.names.job],
                    "verbs": ["get", "patch"],
                },
            ],
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(plan, role_name, "trainer"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": plan.service_account, "namespace": plan.names.namespace}],
        }
    )
    return objects
