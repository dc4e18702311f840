"""The checkpoint PersistentVolumeClaim ``<job>-checkpoints`` (none when the user names a claim)."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import DEFAULT_CHECKPOINT_SIZE, Plan
from grpo_operator.render.common import metadata

# Tells the handlers (and a human) whether deleting the GRPOJob may delete this claim.
DELETE_POLICY_ANNOTATION = "grpo.dev/delete-policy"


def render_checkpoint_pvc(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any] | None:
    """The PVC to create, or None when spec.checkpoints.volume.claimName names an existing one. Its size: the
    spec's, else the preflight's choice for the model (plan.checkpoint_size), else the default."""
    volume = spec.checkpoints.volume
    if not plan.creates_checkpoint_pvc:
        return None
    pvc_spec: dict[str, Any] = {
        # Decided by plan() from the layout: who writes checkpoints, and whether they share a node.
        "accessModes": list(plan.checkpoint_access_modes),
        "resources": {"requests": {"storage": plan.checkpoint_size or DEFAULT_CHECKPOINT_SIZE}},
    }
    if volume.storage_class_name is not None:
        pvc_spec["storageClassName"] = volume.storage_class_name
    meta = metadata(plan, plan.checkpoint_claim, "checkpoints")
    meta["annotations"] = {DELETE_POLICY_ANNOTATION: spec.checkpoints.delete_policy}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": pvc_spec}
