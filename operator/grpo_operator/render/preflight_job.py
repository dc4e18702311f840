"""The preflight Job ``<job>-preflight``: `grpo-train --preflight` on the job's real files, before any GPU.

CPU only, from the trainer image, where the Ray head would run (the GPU-free placement the user
chose), with the pods' own mounts: the same verl.yaml, the model and data claims read-only, the reward
ConfigMap, and an existing checkpoint claim read-write, because whether the trainer can write there is
one of the questions (the probe writes and removes one file of its own). A claim the operator creates is not
mounted: on zonal WaitForFirstConsumer storage the first pod that mounts a claim decides its zone, and that must
be the actor; its size is checked instead. Restricted securityContext, as
the trainer image's user (security.py, one builder for every pod). The verdict comes back as the
container's termination message (JSON).

The Job is annotated with the digest of what it checks (its pod template and verl.yaml): the operator
compares it with the digest the GRPOJob's status expects, so a Job of an older spec is never believed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan, parse_quantity
from grpo_operator.render.common import (
    DIGEST_ANNOTATION,
    apply_pod_placement,
    content_digest,
    pod_metadata,
    trainer_env,
    workload_metadata,
)
from grpo_operator.render.pod_overrides import apply_override
from grpo_operator.render.rayjob import trainer_volumes
from grpo_operator.render.security import restrict
from grpo_operator.render.verl_config import render_verl_config

COMPONENT = "preflight"


def preflight_command(spec: GRPOJobSpec, plan: Plan, gpu_memory: Mapping[str, int]) -> list[str]:
    command = ["grpo-train", "--preflight", "--config_path", plan.mounts.config_file]
    for role, amount in sorted(gpu_memory.items()):
        command += ["--gpu-memory", f"{role}={amount}"]
    if plan.creates_checkpoint_pvc:
        size = spec.checkpoints.volume.size
        command += ["--new-checkpoint-claim", str(int(parse_quantity(size))) if size is not None else "auto"]
    return command


def render_preflight_job(spec: GRPOJobSpec, plan: Plan, gpu_memory: Mapping[str, int]) -> dict[str, Any]:
    """The Job checking `spec` as planned; `gpu_memory`: bytes per GPU of each role's pool, where known."""
    resources = {"cpu": str(spec.preflight.resources.cpu), "memory": str(spec.preflight.resources.memory)}
    # The driver's mounts (data, models, reward), and the checkpoint claim only when it exists before the job: a
    # new one binds where its first pod runs, and on zonal storage that must be the actor, not this CPU pod.
    vols = trainer_volumes(spec, plan, "head", checkpoints=not plan.creates_checkpoint_pvc)
    container = {
        "name": COMPONENT,
        "image": plan.image,
        "command": preflight_command(spec, plan, gpu_memory),
        "env": trainer_env(spec, plan),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": vols.mounts,
        # A crash before the verdict is written still says something: the log's last lines.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": plan.service_account,
        # It reads files, not the API.
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": vols.volumes,
    }
    # The same settings as every other pod of the job (security.py), so the preflight tests the access the
    # trainer will have, and its volumes' ownership is changed only where the root does not match already.
    restrict(pod_spec)
    shape = plan.preflight_pod or plan.head
    apply_pod_placement(pod_spec, spec, shape)
    template = apply_override({"metadata": pod_metadata(spec, plan, COMPONENT), "spec": pod_spec}, shape.override)
    digest = content_digest(template, render_verl_config(spec, plan))
    meta = workload_metadata(spec, plan, plan.names.preflight_job, COMPONENT)
    meta["annotations"] = {DIGEST_ANNOTATION: digest}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            # Deterministic checks: a retry would fail the same way, and the verdict is the first pod's.
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.preflight.timeout_seconds,
            "template": template,
        },
    }


def rendered_digest(child: Mapping[str, Any]) -> str | None:
    """The digest a child was rendered with (None when it carries none)."""
    return ((child.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
