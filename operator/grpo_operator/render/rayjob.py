"""The KubeRay RayJob (ray.io/v1, KubeRay v1.5) running grpo-train on an embedded RayCluster.

Head: no GPUs; runs the verl driver and serves the trainer's metrics on port 9400.
Workers: one group per role, pinned twice (see DESIGN.md): Kubernetes nodeSelector/tolerations put
the pods on the role's pool, and the group's Ray custom resource ``grpo.dev/<role>`` (KubeRay's
``workerGroupSpecs[].resources``) lets the trainer steer verl's placement-group bundles onto them.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api import GRPOJobSpec
from grpo_operator.node_rules import GPU_RESOURCE
from grpo_operator.plan import METRICS_PORT, Plan, PodShape, WorkerGroup
from grpo_operator.render.common import (
    JOB_LABEL,
    ROLE_LABEL,
    Volumes,
    apply_pod_placement,
    pod_metadata,
    trainer_env,
    workload_metadata,
)
from grpo_operator.render.pod_overrides import apply_override
from grpo_operator.render.security import restrict
from grpo_operator.render.submitter import SUBMISSION_MODE, render_submitter_template

ENTRYPOINT_TEMPLATE = "grpo-train --config_path {config_file}"
REHEARSAL_FLAG = "--rehearsal"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# The trainer image's Ray (images/trainer/requirements.in; a unit test keeps them equal). KubeRay reads
# rayClusterSpec.rayVersion to decide what the cluster can do: token authentication needs 2.52 or later.
RAY_VERSION = "2.52.1"


# The pods that write checkpoints: verl's driver and TaskRunner on the head (the tracker file, the
# dataloader state, the prepared parquet data) and every actor rank (its shards).
CHECKPOINT_WRITERS = frozenset({"head", "actor"})
# The training data is read only where verl's dataset lives: the TaskRunner, pinned to the head.
DATA_READERS = frozenset({"head"})


def trainer_volumes(spec: GRPOJobSpec, plan: Plan, role: str, checkpoints: bool = True) -> Volumes:
    """Volumes and mounts of one Ray pod (docs/config-contract.md, "Mount points"): each claim only where
    it is read. The models claim is read everywhere: the head loads the tokenizer and config, the actor
    and reference the weights, vLLM its weights, the reward model the policy's tokenizer."""
    m = plan.mounts
    vols = Volumes()
    vols.configmap("config", plan.names.configmap, m.config_file, sub_path=m.config_key)
    vols.claim("models", spec.model.claim_name, m.models, read_only=True)
    if plan.reward_model_claim is not None:
        vols.claim("reward-models", plan.reward_model_claim, m.reward_models, read_only=True)
    if role in DATA_READERS:
        vols.claim("data", spec.data.claim_name, m.data, read_only=True)
    if role in CHECKPOINT_WRITERS:
        if checkpoints:
            vols.checkpoints(plan, read_only=False)
        vols.resume_source(plan)
    if spec.reward.function is not None and spec.reward.type == "function":
        # Ray may place verl's reward workers on any pod with CPUs.
        vols.configmap("reward-function", spec.reward.function.config_map_name, m.reward_function_dir)
    return vols.shm()


def _share_actor_node(pod_spec: dict[str, Any], plan: Plan) -> None:
    """Put the head on the actor pod's node: a ReadWriteOnce checkpoint claim attaches to one node.

    The head follows the actor (not the other way round): the actor's GPUs are the scarce part, and the
    scheduler places a pod whose required affinity matches nothing yet once a matching pod is placed. It takes the
    actor's tolerations, the GPU taint's among them: a GPU-less pod gets none from ExtendedResourceToleration.
    """
    actor = plan.actor
    term = {
        "labelSelector": {"matchLabels": {JOB_LABEL: plan.names.job, ROLE_LABEL: actor.role}},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }
    pod_spec.setdefault("affinity", {})["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    # On the actor's node, the actor's nodeSelector holds by definition, and placement.head's may not: a head
    # pinned to a CPU pool could never join an actor in a GPU pool (the preflight, the converter and KubeRay's
    # submitter keep placement.head).
    pod_spec.pop("nodeSelector", None)
    if actor.pod.node_selector:
        pod_spec["nodeSelector"] = dict(actor.pod.node_selector)
    tolerations = list(pod_spec.get("tolerations", []))
    tolerations += [dict(t) for t in actor.pod.tolerations if dict(t) not in tolerations]
    if tolerations:
        pod_spec["tolerations"] = tolerations


# A head container that lists any port gets only the ports it lists: KubeRay then finds no
# dashboard port and the RayJob never submits. So Ray's own ports are declared with ours.
HEAD_PORTS: list[dict[str, Any]] = [
    {"name": "gcs-server", "containerPort": 6379, "protocol": "TCP"},
    {"name": "dashboard", "containerPort": 8265, "protocol": "TCP"},
    {"name": "client", "containerPort": 10001, "protocol": "TCP"},
    {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
    {"name": "grpo-metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
]


def _resources(pod: PodShape, gpus: int) -> dict[str, Any]:
    # requests == limits: Guaranteed QoS, so a training pod is the last to be evicted.
    amounts: dict[str, str] = {"cpu": pod.cpu, "memory": pod.memory}
    if gpus:
        amounts[GPU_RESOURCE] = str(gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod_template(
    spec: GRPOJobSpec,
    plan: Plan,
    *,
    role: str,
    container_name: str,
    pod: PodShape,
    gpus: int,
    ports: list[dict[str, Any]],
) -> dict[str, Any]:
    vols = trainer_volumes(spec, plan, role)
    container: dict[str, Any] = {
        "name": container_name,
        "image": plan.image,
        "env": trainer_env(spec, plan),
        "resources": _resources(pod, gpus),
        "volumeMounts": vols.mounts,
    }
    if ports:
        container["ports"] = ports
    pod_spec: dict[str, Any] = {
        "serviceAccountName": plan.service_account,
        "containers": [container],
        "volumes": vols.volumes,
    }
    apply_pod_placement(pod_spec, spec, pod)
    if role == "head" and plan.writers_share_node:
        _share_actor_node(pod_spec, plan)
    restrict(pod_spec)  # KubeRay copies the Ray container's securityContext to the init container it adds
    return apply_override({"metadata": pod_metadata(spec, plan, "trainer", **{ROLE_LABEL: role}), "spec": pod_spec},
                          pod.override)


def _head_group(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    return {
        # The head must not be offered to verl's GPU bundles, and the dashboard must be reachable
        # by KubeRay's job submitter from outside the pod.
        "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": _pod_template(
            spec,
            plan,
            role="head",
            container_name="ray-head",
            pod=plan.head,
            gpus=0,
            ports=HEAD_PORTS,
        ),
    }


def _worker_group(spec: GRPOJobSpec, plan: Plan, group: WorkerGroup) -> dict[str, Any]:
    return {
        "groupName": group.name,
        # Fixed size: GRPO needs every GPU of the layout from the first step; no autoscaling.
        "replicas": group.replicas,
        "minReplicas": group.replicas,
        "maxReplicas": group.replicas,
        # KubeRay turns this into `ray start --resources`; CPU/GPU come from the container limits.
        "resources": {group.ray_resource: str(group.gpus)},
        "rayStartParams": {},
        "template": _pod_template(
            spec, plan, role=group.role, container_name="ray-worker", pod=group.pod, gpus=group.gpus, ports=[]
        ),
    }


def entrypoint(spec: GRPOJobSpec, plan: Plan) -> str:
    """The driver's command: training, or with spec.rehearsal the rehearsal of it (same config, no training)."""
    command = ENTRYPOINT_TEMPLATE.format(config_file=plan.mounts.config_file)
    return f"{command} {REHEARSAL_FLAG}" if spec.rehearsal else command


def ray_auth_options(spec: GRPOJobSpec) -> dict[str, Any]:
    """``rayClusterSpec.authOptions`` for token authentication, or nothing (a KubeRay older than v1.5.1
    refuses the field, and a job with ``rayAuth: disabled`` must still run there).

    With ``mode: token`` KubeRay (v1.5.1) makes a Secret named after the RayCluster holding a random token,
    owned by the RayCluster (so it goes with it and the operator never sees the token), puts
    ``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN`` on every Ray container and on the submitter's, and sends the token
    when it polls the dashboard. Ray then refuses the dashboard's API (401/403) and the GCS's RPCs
    (UNAUTHENTICATED) to anyone without it."""
    return {"authOptions": {"mode": "token"}} if spec.security.ray_auth == "token" else {}


def render_rayjob(spec: GRPOJobSpec, plan: Plan) -> dict[str, Any]:
    """The RayJob ``<job>``.

    ``spec.suspend`` is only the initial value: after creation Kueue owns it, and the handlers
    must never overwrite it (they patch it only to follow the GRPOJob's scheduling.suspend).
    """
    meta = workload_metadata(spec, plan, plan.names.rayjob, "trainer")
    rayjob_spec: dict[str, Any] = {
        "entrypoint": entrypoint(spec, plan),
        # Kueue needs it, and GPUs should not idle after the job ends: the RayCluster goes after
        # ttlSecondsAfterFinished, which the operator sets to 0 once training completed (mirror.py), so it
        # is kept only after a failure, for its logs.
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": spec.scheduling.keep_failed_cluster_seconds,
        # Each retry is a new RayCluster on the same checkpoint volume; verl's resume_mode=auto
        # makes it continue from the latest checkpoint.
        "backoffLimit": plan.retries,
        "suspend": spec.scheduling.suspend,
        # The submitter Job's pod carries the job's pull secrets, account, placement and Pod Security
        # (render/submitter.py says why not KubeRay's default pod or SidecarMode).
        "submissionMode": SUBMISSION_MODE,
        "submitterPodTemplate": render_submitter_template(spec, plan),
        "rayClusterSpec": {
            "rayVersion": RAY_VERSION,
            **ray_auth_options(spec),
            "enableInTreeAutoscaling": False,
            "headGroupSpec": _head_group(spec, plan),
            "workerGroupSpecs": [_worker_group(spec, plan, g) for g in plan.groups],
        },
    }
    if spec.scheduling.active_deadline_seconds is not None:
        rayjob_spec["activeDeadlineSeconds"] = spec.scheduling.active_deadline_seconds
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": rayjob_spec}
