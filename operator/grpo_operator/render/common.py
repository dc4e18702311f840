"""Labels, metadata and pod pieces shared by the render functions."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import METRICS_PORT, Plan, PodShape
from grpo_operator.render.guardrails import guardrails_env

MANAGED_BY = "app.kubernetes.io/managed-by"
JOB_LABEL = "grpo.dev/job"
ROLE_LABEL = "grpo.dev/role"
COMPONENT_LABEL = "app.kubernetes.io/component"
OPERATOR_NAME = "grpo-operator"
# What a child was rendered from: the operator replaces a child whose digest differs (before training
# starts, while an edited spec is still applied) and leaves one that matches.
DIGEST_ANNOTATION = "grpo.dev/content-digest"
# The trainer image's user (images/trainer/Dockerfile: useradd --uid 1000 ray).
TRAINER_UID = 1000


def content_digest(*parts: Any) -> str:
    """A short, stable digest of JSON-able parts (a label value: at most 63 characters)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def labels(plan: Plan, component: str, **extra: str) -> dict[str, str]:
    """Labels every child carries: who manages it, which GRPOJob, what part it is."""
    return {MANAGED_BY: OPERATOR_NAME, JOB_LABEL: plan.names.job, COMPONENT_LABEL: component, **extra}


def metadata(plan: Plan, name: str, component: str, **extra_labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.names.namespace, "labels": labels(plan, component, **extra_labels)}


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def workload_metadata(spec: GRPOJobSpec, plan: Plan, name: str, component: str) -> dict[str, Any]:
    """Metadata of a child that runs pods as a workload of its own (the RayJob, the preflight and converter Jobs):
    with spec.scheduling.queueName, Kueue's queue label on every one of them. Where Kueue manages Jobs without the
    label (manageJobsWithoutQueueName, or a LocalQueue named `default`), an unlabelled Job would be queued where
    no quota was meant for it, or wait forever; labelled, each is admitted from the job's own queue."""
    meta = metadata(plan, name, component)
    if spec.scheduling.queue_name:
        meta["labels"][KUEUE_QUEUE_LABEL] = spec.scheduling.queue_name
    return meta


def trainer_env(spec: GRPOJobSpec, plan: Plan) -> list[dict[str, Any]]:
    """Env of every trainer container: the GRPOJob to report into, the metrics port, the guardrails, then the
    user's."""
    env: list[dict[str, Any]] = [
        {"name": "GRPO_JOB_NAME", "value": plan.names.job},
        {"name": "GRPO_JOB_NAMESPACE", "value": plan.names.namespace},
        {"name": "GRPO_METRICS_PORT", "value": str(METRICS_PORT)},
    ]
    # Before the user's: a user's GRPO_GUARDRAILS (a test of the trainer's detectors) wins.
    env.append(guardrails_env(spec))
    env += [e.model_dump(by_alias=True, exclude_none=True) for e in spec.env or []]
    return env


def image_pull_secrets(spec: GRPOJobSpec) -> list[dict[str, str]]:
    return [{"name": s.name} for s in spec.image_pull_secrets or []]


class Volumes:
    """Pod volumes and container mounts, one volume per claim or ConfigMap however often it is mounted.

    Two volumes naming the same PVC in one pod are legal but mount it twice; the sketch's export
    target even shares the model claim, so claims are de-duplicated and the mounts carry readOnly.
    """

    def __init__(self) -> None:
        self.volumes: list[dict[str, Any]] = []
        self.mounts: list[dict[str, Any]] = []
        self._by_source: dict[tuple[str, str], str] = {}

    def claim(
        self, name: str, claim: str, mount_path: str, *, read_only: bool, sub_path: str | None = None
    ) -> Volumes:
        volume = self._volume(name, ("pvc", claim), {"persistentVolumeClaim": {"claimName": claim}})
        mount: dict[str, Any] = {"name": volume, "mountPath": mount_path, "readOnly": read_only}
        if sub_path is not None:
            mount["subPath"] = sub_path
        self.mounts.append(mount)
        return self

    def checkpoints(self, plan: Plan, *, read_only: bool) -> Volumes:
        """The job's own directory of its checkpoint claim at /checkpoints (the kubelet creates it)."""
        return self.claim(
            "checkpoints", plan.checkpoint_claim, plan.mounts.checkpoints, read_only=read_only,
            sub_path=plan.checkpoint_sub_path,
        )

    def resume_source(self, plan: Plan) -> Volumes:
        """A warm start's checkpoint directory, read-only at /resume-from, when there is one."""
        source = plan.resume_from
        if source is None:
            return self
        return self.claim("resume-from", source.claim, plan.mounts.resume_from, read_only=True,
                          sub_path=source.sub_path)

    def configmap(self, name: str, configmap: str, mount_path: str, *, sub_path: str | None = None) -> Volumes:
        volume = self._volume(name, ("configmap", configmap), {"configMap": {"name": configmap}})
        mount: dict[str, Any] = {"name": volume, "mountPath": mount_path, "readOnly": True}
        if sub_path is not None:
            mount["subPath"] = sub_path
        self.mounts.append(mount)
        return self

    def shm(self) -> Volumes:
        # vLLM, NCCL and Ray's object store use /dev/shm; the container runtime's 64Mi default is far too small.
        self.volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        self.mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        return self

    def _volume(self, name: str, source: tuple[str, str], body: dict[str, Any]) -> str:
        existing = self._by_source.get(source)
        if existing is not None:
            return existing
        self._by_source[source] = name
        self.volumes.append({"name": name, **body})
        return name


def pod_metadata(spec: GRPOJobSpec, plan: Plan, component: str, **extra_labels: str) -> dict[str, Any]:
    """A pod template's metadata: the user's podMetadata, with our labels taking precedence."""
    user = spec.pod_metadata
    meta: dict[str, Any] = {"labels": {**(user.labels if user else {}), **labels(plan, component, **extra_labels)}}
    if user and user.annotations:
        meta["annotations"] = dict(user.annotations)
    return meta


def apply_pod_placement(pod_spec: dict[str, Any], spec: GRPOJobSpec, shape: PodShape) -> dict[str, Any]:
    """Pinning, priority and pull secrets every pod of a job shares; returns `pod_spec` for chaining."""
    if shape.node_selector:
        pod_spec["nodeSelector"] = dict(shape.node_selector)
    if shape.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in shape.tolerations]
    if shape.node_terms:
        terms = {"nodeSelectorTerms": [dict(t) for t in shape.node_terms]}
        pod_spec.setdefault("affinity", {})["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = image_pull_secrets(spec)
    return pod_spec
