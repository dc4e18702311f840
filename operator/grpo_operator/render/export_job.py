"""The converter Job ``<job>-export``: a verl FSDP checkpoint -> HuggingFace safetensors, verified."""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render.common import Volumes, apply_pod_placement, pod_metadata, workload_metadata
from grpo_operator.render.pod_overrides import apply_override
from grpo_operator.render.security import restrict

# The converter's --dtype spellings for the API's.
CONVERTER_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "keep": "keep"}


def checkpoint_dir(plan: Plan, step: int | None) -> str:
    """A step's checkpoint directory, or the checkpoint root (the converter takes the latest)."""
    root = plan.mounts.checkpoints
    return root if step is None else f"{root}/global_step_{step}"


def render_export_job(spec: GRPOJobSpec, plan: Plan, step: int | None = None) -> dict[str, Any]:
    """The Job converting the checkpoint of ``step`` (the latest when None) into spec.export.target.

    No GPU: the converter streams tensors on CPU. The checkpoint volume is mounted read-only so an
    export can never damage what training wrote. The container's termination message carries the
    converter's JSON summary (path, step, sizeBytes) for the handler to copy into status.export.
    """
    target = spec.export.target
    if target is None:
        raise ValueError("render_export_job needs spec.export.target (the CRD requires it when export is enabled)")
    m = plan.mounts
    vols = Volumes()
    vols.checkpoints(plan, read_only=True)  # this job's directory only: never another job's latest step
    vols.claim("export-target", target.claim_name, m.export, read_only=False)
    command = [
        "grpo-export",
        "--checkpoint",
        checkpoint_dir(plan, step),
        "--target",
        f"{m.export}/{target.path}",
        "--max-shard-size",
        spec.export.max_shard_size,
        "--dtype",
        CONVERTER_DTYPES[spec.export.dtype],
        "--verify",
        "--job",
        plan.names.job,
        "--base-model",
        spec.model.path,
    ]
    shape = plan.export_pod
    container = {
        "name": "export",
        "image": plan.image,
        "command": command,
        "resources": {
            "requests": {"cpu": shape.cpu, "memory": shape.memory},
            "limits": {"cpu": shape.cpu, "memory": shape.memory},
        },
        "volumeMounts": vols.mounts,
        "terminationMessagePolicy": "File",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": plan.service_account,
        # The converter talks to no API; the handler reads its result from the termination message.
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": vols.volumes,
    }
    # CPU work: where spec.export places it, by default where the Ray head runs (the GPU-free placement).
    apply_pod_placement(pod_spec, spec, shape)
    restrict(pod_spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": workload_metadata(spec, plan, plan.names.export_job, "export"),
        "spec": {
            # One retry covers a node lost mid-copy; the converter is idempotent (identical target is
            # accepted) and a deterministic refusal fails the same way twice, cheaply.
            "backoffLimit": 1,
            "template": apply_override({"metadata": pod_metadata(spec, plan, "export"), "spec": pod_spec},
                                       shape.override),
        },
    }
