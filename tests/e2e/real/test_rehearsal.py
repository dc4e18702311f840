"""A real Ray cluster from the trainer image on the real node, through spec.rehearsal.

The GRPOJob's RayCluster forms for real (head, actor and rollout pods from the trainer image, each Ray node
advertising its role's resource), KubeRay's submitter submits `grpo-train --rehearsal` to the real dashboard,
and the driver runs the job's real entrypoint up to the point of training: the preflight's checks on the
pods' real mounts (a tiny Qwen2 model and tokenizer built here, prompts, the reward function), verl's pools
placed on their roles' Ray nodes with a probe in every bundle, the checkpoint directory written by the actor
and read by the driver. Its verdict becomes status.rehearsal and the Rehearsal condition.

A broken reward function is caught by the preflight pod (real, on the real node) before any Ray pod exists;
with the preflight off, the rehearsal in the Ray cluster catches it instead and the job fails. The passing
rehearsal runs in test_pod_overrides.py, with the actor's pod overrides in place (one real Ray cluster, not two).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.rehearsal_job import ON_REAL_NODE, prepare_namespace, rehearsal_job
from grpo_operator.render.security import container_security_context, pod_security_context

from ..grpojobs import apply_job
from ..helm import Release
from ..kube import create_namespace, delete_namespace, get, wait_for
from .conftest import NodeImages

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def rehearsal_namespace(real_node: LocalCluster, operator_pod: Release) -> Iterator[str]:
    """Model, prompts and reward functions on the real node's volumes, as a user would put them there.

    The namespace goes afterwards, its jobs before the module ends: the session's operator, back once the
    operator pod is uninstalled, renders another default trainer image and would re-run the refused job's
    preflight with it."""
    namespace = create_namespace(real_node, "rehearsal-real")
    prepare_namespace(real_node, namespace)
    yield namespace
    delete_namespace(real_node, namespace, wait_for_jobs=True)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def _job_pods(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return [p for p in get(cluster, "pods", "-n", namespace)["items"] if p["metadata"]["name"].startswith(name)]


def run_to(cluster: LocalCluster, namespace: str, body: dict[str, Any], wanted: str
           ) -> tuple[dict[str, Any], list[str], dict[str, dict[str, Any]]]:
    """Apply the job and wait for phase `wanted`; (its status, the phases seen, every pod seen on the way,
    by name: a passed rehearsal's Ray pods are deleted as soon as it succeeds)."""
    name = body["metadata"]["name"]
    apply_job(cluster, namespace, body)
    pods: dict[str, dict[str, Any]] = {}
    phases: list[str] = []

    def reached() -> bool:
        pods.update({p["metadata"]["name"]: p for p in _job_pods(cluster, namespace, name)
                     if p["spec"].get("nodeName")})
        current = (get(cluster, "grpojob", name, "-n", namespace).get("status") or {}).get("phase")
        if current and (not phases or phases[-1] != current):
            phases.append(current)
        return current == wanted

    try:
        wait_for(f"GRPOJob {name} phase {wanted}", reached, timeout=900, interval=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; phases {phases}; status {get(cluster, 'grpojob', name, '-n', namespace)}"
                             ) from None
    return get(cluster, "grpojob", name, "-n", namespace)["status"], phases, pods


def test_broken_reward_function_is_refused_by_the_real_preflight_pod_before_any_ray_pod(
        real_node: LocalCluster, rehearsal_namespace: str) -> None:
    name = "rehearse-preflight"
    status, _, pods = run_to(real_node, rehearsal_namespace, rehearsal_job(name, "broken.py"), "Invalid")

    preflight = _condition(status, "Preflight")
    assert preflight["status"] == "False", preflight
    assert "reward" in preflight["message"] and "no-such-key" in preflight["message"], preflight["message"]
    assert not get(real_node, "rayjobs", "-n", rehearsal_namespace)["items"]
    (pod,) = _job_pods(real_node, rehearsal_namespace, f"{name}-preflight")
    assert pod["spec"]["nodeName"] == node_config.NODE_NAME
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert list(pods) == [pod["metadata"]["name"]]  # no Ray pod ever


def _ray_pods(pods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods.values() if "ray.io/node-type" in p["metadata"].get("labels", {})]


# The passing rehearsal (the Ray cluster formed, every pool on its role's pod, the checkpoint directory shared) is
# test_pod_overrides.py's, which runs it with spec.pods.actor overrides in place: one real Ray cluster, not two.


TOKEN_JOB, OPEN_JOB = "rehearse-broken", "rehearse-open"


@pytest.fixture(scope="module")
def failed_rehearsals(real_node: LocalCluster, rehearsal_namespace: str
                      ) -> dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]:
    """Two jobs whose rehearsal fails in their Ray cluster (the preflight off, a broken reward function), one
    with Ray token authentication (the default) and one with it disabled, run side by side; by name, each one's
    status and pods. A failed job's Ray cluster is kept (keepFailedClusterSeconds) for the probes below."""
    bodies = {name: rehearsal_job(name, "broken.py", preflight=False) for name in (TOKEN_JOB, OPEN_JOB)}
    bodies[OPEN_JOB]["spec"]["security"] = {"rayAuth": "disabled"}
    for body in bodies.values():
        apply_job(real_node, rehearsal_namespace, body)
    return {name: run_to(real_node, rehearsal_namespace, body, "Failed")[::2] for name, body in bodies.items()}


def test_without_the_preflight_the_rehearsal_in_the_ray_cluster_fails_the_job_naming_the_reward(
        failed_rehearsals: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]) -> None:
    status, pods = failed_rehearsals[TOKEN_JOB]

    assert _condition(status, "Rehearsal")["status"] == "False", status["conditions"]
    failed = [c for c in status["rehearsal"]["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["reward.function"], failed
    assert "no-such-key" in failed[0]["message"]
    # the pools were placed all the same: only the reward function failed, in the real Ray cluster
    assert next(c for c in status["rehearsal"]["checks"] if c["name"] == "ray.placement.global_pool")["ok"]
    assert len(_ray_pods(pods)) == 3


# Run in a pod of another namespace, without the token: the dashboard's job API (what `ray job submit` uses) and
# the GCS (what `ray.init(address=...)` and every Ray node use), for each head Service given as argv[1] (JSON).
PROBE = """
import json, sys, urllib.error, urllib.request
import grpc
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
found = {}
for name, host in json.loads(sys.argv[1]).items():
    try:
        with urllib.request.urlopen(f"http://{host}:8265/api/jobs/", timeout=15) as response:
            found[name + "/dashboard"] = str(response.status)
    except urllib.error.HTTPError as exc:
        found[name + "/dashboard"] = f"{exc.code} {exc.read().decode()[:200]}"
    stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(grpc.insecure_channel(f"{host}:6379"))
    try:
        reply = stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), timeout=15)
        found[name + "/gcs"] = f"OK {len(reply.node_info_list)} nodes"
    except grpc.RpcError as exc:
        found[name + "/gcs"] = f"{exc.code().name} {exc.details()}"
print(json.dumps(found))
"""


def _head_service(cluster: LocalCluster, namespace: str, job: str) -> str:
    rayjob = get(cluster, "rayjob", job, "-n", namespace)
    return f"{rayjob['status']['rayClusterName']}-head-svc.{namespace}.svc.cluster.local"


def test_only_the_jobs_own_pods_reach_a_token_protected_ray_cluster(
        real_node: LocalCluster, node_images: NodeImages, rehearsal_namespace: str,
        failed_rehearsals: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]]) -> None:
    """The rehearsal with the token (the default) formed its cluster, submitted and reported through KubeRay,
    which sent the token; a pod elsewhere without it is refused by the dashboard and the GCS of that cluster
    and let into the one with ``rayAuth: disabled``."""
    token_status, _ = failed_rehearsals[TOKEN_JOB]
    assert token_status["rehearsal"]["checks"], token_status  # the driver ran in the token cluster and reported
    secret = get(real_node, "secret", get(real_node, "rayjob", TOKEN_JOB, "-n", rehearsal_namespace)["status"][
        "rayClusterName"], "-n", rehearsal_namespace)
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"  # goes with the cluster
    targets = {name: _head_service(real_node, rehearsal_namespace, name) for name in (TOKEN_JOB, OPEN_JOB)}
    namespace = create_namespace(real_node, "ray-auth-probe")
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
               "spec": {**ON_REAL_NODE, "restartPolicy": "Never", "automountServiceAccountToken": False,
                        "securityContext": pod_security_context(),
                        "containers": [{"name": "probe", "image": node_images.trainer, "imagePullPolicy": "Never",
                                        "command": ["python", "-c", PROBE, json.dumps(targets)],
                                        "securityContext": container_security_context(),
                                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                                      "limits": {"cpu": "1", "memory": "1Gi"}}}]}}
        real_node.apply(pod)
        wait_for("the probe pod to finish", lambda: (get(real_node, "pod", "probe", "-n", namespace)["status"].get(
            "phase") in ("Succeeded", "Failed")), timeout=180)
        log = real_node.kubectl("logs", "-n", namespace, "probe").stdout
        found = json.loads(log.strip().splitlines()[-1])
    finally:
        delete_namespace(real_node, namespace)
    print(f"probe from another namespace: {found}")
    assert found[f"{TOKEN_JOB}/dashboard"].startswith("401 "), found
    assert found[f"{TOKEN_JOB}/gcs"].startswith("UNAUTHENTICATED"), found
    assert found[f"{OPEN_JOB}/dashboard"] == "200", found
    assert found[f"{OPEN_JOB}/gcs"] == "OK 3 nodes", found  # head, actor, rollout
