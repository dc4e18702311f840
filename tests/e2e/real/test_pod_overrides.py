"""spec.pods.<role> on real pods: an extended resource, an env var and a volume reach the actor's Ray pod.

The real node advertises an extended resource as a device plugin would (a JSON patch of its status capacity,
which the kubelet copies to allocatable), and a rehearsal job's spec.pods.actor asks for one of it, sets an env
var and mounts a ConfigMap. While the actor's Ray pod runs, the test reads what the kubelet made of it: the
variable and the file from inside the container (`kubectl exec`), the resource from the kubelet's own list of its
pods and from the scheduler, which refuses a pod that asks for all four while the actor holds one. The rehearsal
then passes: the session's one passing rehearsal (its Ray cluster, verl's pools on their roles' pods, the
checkpoint directory shared; test_rehearsal.py has the failing ones). A job asking for five is refused by the
operator's capacity check before any pod exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.rehearsal_job import ON_REAL_NODE, prepare_namespace, rehearsal_job
from grpo_operator.render.common import JOB_LABEL, ROLE_LABEL

from ..grpojobs import apply_job, condition, wait_phase
from ..helm import Release
from ..kube import create_namespace, delete_namespace, get, items, wait_for, wait_object
from .conftest import NodeImages

pytestmark = pytest.mark.e2e

RESOURCE = "example.com/rdma-test"
ADVERTISED = "4"
_PATH = "/status/capacity/" + RESOURCE.replace("/", "~1")  # JSON pointer: '/' in a key is ~1
CONFIGMAP, MOUNT, FILE, TEXT = "fabric-test", "/fabric-test", "fabric.conf", "fabric override on the real node\n"
ENV = {"name": "FABRIC_TEST", "value": "on"}


def _allocatable(cluster: LocalCluster) -> str | None:
    return get(cluster, "node", node_config.NODE_NAME)["status"].get("allocatable", {}).get(RESOURCE)


@pytest.fixture(scope="module")
def advertised(real_node: LocalCluster) -> Iterator[str]:
    """The real node offers ADVERTISED of RESOURCE (capacity patched, allocatable as the kubelet derives it at
    its next status update, within ~10 s), and no longer afterwards: the node is every real-node test's."""
    api = real_node.api
    api.patch("nodes", node_config.NODE_NAME, None, [{"op": "add", "path": _PATH, "value": ADVERTISED}],
              kind="json", subresource="status")
    try:
        wait_for(f"the kubelet to make {RESOURCE} allocatable", lambda: _allocatable(real_node) == ADVERTISED,
                 timeout=60, interval=0.5)
        yield RESOURCE
    finally:
        api.patch("nodes", node_config.NODE_NAME, None, [{"op": "remove", "path": _PATH}], kind="json",
                  subresource="status")
        wait_for(f"{RESOURCE} gone from the node's allocatable", lambda: _allocatable(real_node) is None,
                 timeout=60, interval=0.5)


@pytest.fixture(scope="module")
def overrides_namespace(real_node: LocalCluster, operator_pod: Release, advertised: str) -> Iterator[str]:
    """The rehearsal's model, prompts and reward functions, and the ConfigMap the override mounts. Its jobs go
    before the module ends (the session's operator comes back once the operator pod is uninstalled)."""
    namespace = create_namespace(real_node, "overrides-real")
    prepare_namespace(real_node, namespace)
    real_node.api.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP,
                                                                              "namespace": namespace},
                         "data": {FILE: TEXT}})
    yield namespace
    delete_namespace(real_node, namespace, wait_for_jobs=True)


def _job(name: str, amount: int) -> dict[str, Any]:
    body = rehearsal_job(name, "good.py")
    body["spec"]["pods"] = {"actor": {
        "resources": {RESOURCE: amount},
        "env": [dict(ENV)],
        "volumes": [{"name": "fabric", "mountPath": MOUNT, "readOnly": True, "configMap": {"name": CONFIGMAP}}],
    }}
    return body


def _running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


def _exec(cluster: LocalCluster, pod: dict[str, Any], script: str) -> str:
    meta = pod["metadata"]
    return cluster.kubectl("exec", "-n", meta["namespace"], meta["name"], "-c", pod["spec"]["containers"][0]["name"],
                           "--", "sh", "-c", script).stdout


def _inside(cluster: LocalCluster, pod: dict[str, Any]) -> dict[str, str]:
    """From inside the running container: the env var, the ConfigMap's file and the volume's mount entry."""
    script = (f"echo \"env=$(printenv {ENV['name']} || echo '<unset>')\"; "
              f"echo \"file=$(cat {MOUNT}/{FILE} 2>&1)\"; "
              f"echo \"mount=$(grep ' {MOUNT} ' /proc/self/mounts || echo '<no mount>')\"")
    found = dict(line.split("=", 1) for line in _exec(cluster, pod, script).splitlines() if "=" in line)
    print(f"inside {pod['metadata']['name']}: {found}")
    return found


def _kubelets_copy(cluster: LocalCluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the kubelet holds it (its /pods endpoint, through the apiserver's node proxy)."""
    listed = json.loads(cluster.api.text(f"/api/v1/nodes/{node_config.NODE_NAME}/proxy/pods"))
    return next(p for p in listed["items"] if p["metadata"]["uid"] == pod["metadata"]["uid"])


def _scheduler_verdict(cluster: LocalCluster, namespace: str, image: str, amount: str) -> dict[str, Any]:
    """The PodScheduled condition of a pod pinned to the real node that asks for `amount` of RESOURCE; the pod is
    deleted at once (if the scheduler placed it, it must not run)."""
    name = "asks-for-every-device"
    real = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {**ON_REAL_NODE, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sleep", "1"],
                                     "resources": {"limits": {RESOURCE: amount, "cpu": "10m", "memory": "16Mi"}}}]}}
    cluster.api.create(real)
    try:
        def decided(pod: dict | None) -> dict | None:
            return next((c for c in ((pod or {}).get("status") or {}).get("conditions") or []
                         if c["type"] == "PodScheduled"), None)
        return wait_object(cluster, "pods", name, namespace, decided, 30, "the scheduler's verdict on the probe pod")
    finally:
        cluster.api.delete("pods", name, namespace)


def test_actor_pod_override_reaches_the_running_container_and_the_rehearsal_passes(
        real_node: LocalCluster, node_images: NodeImages, overrides_namespace: str) -> None:
    namespace, name = overrides_namespace, "overrides-ok"
    apply_job(real_node, namespace, _job(name, 1))
    selector = f"{JOB_LABEL}={name},{ROLE_LABEL}=actor,ray.io/node-type=worker"
    seen: dict[str, Any] = {}
    phases: list[str] = []

    ray_pods: dict[str, dict[str, Any]] = {}

    def watched() -> bool:
        """Every poll: the job's phase and its Ray pods; once, while the actor's Ray pod runs, what the kubelet made
        of it."""
        ray_pods.update({p["metadata"]["name"]: p for p in items(real_node, "pods", "-n", namespace, "-l",
                                                                  f"{JOB_LABEL}={name},ray.io/node-type")
                         if p["spec"].get("nodeName")})
        current = (get(real_node, "grpojob", name, "-n", namespace).get("status") or {}).get("phase")
        if current and (not phases or phases[-1] != current):
            phases.append(current)
        if "pod" not in seen:
            running = [p for p in items(real_node, "pods", "-n", namespace, "-l", selector) if _running(p)]
            if running:
                pod = running[0]
                seen["pod"] = pod
                seen["inside"] = _inside(real_node, pod)
                seen["kubelet"] = _kubelets_copy(real_node, pod)
                seen["scheduler"] = _scheduler_verdict(real_node, namespace, node_images.trainer, ADVERTISED)
                seen["still running"] = _running(get(real_node, "pod", pod["metadata"]["name"], "-n", namespace))
        if current in ("Failed", "Invalid"):
            raise AssertionError(f"the job ended {current}: {get(real_node, 'grpojob', name, '-n', namespace)}")
        return current == "Succeeded"

    started = time.monotonic()
    wait_for(f"GRPOJob {name} Succeeded, its actor pod seen running", watched, timeout=900, interval=0.5)
    assert "pod" in seen, f"the actor's Ray pod was never seen running; phases {phases}"
    print(f"{name}: Succeeded after {time.monotonic() - started:.0f}s; phases {phases}")

    # The pod object: what the apiserver stored from the operator's RayJob through KubeRay.
    pod = seen["pod"]
    assert pod["spec"]["nodeName"] == node_config.NODE_NAME
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"][RESOURCE] == "1", container["resources"]
    assert container["resources"]["requests"][RESOURCE] == "1", container["resources"]
    assert ENV in container["env"], container["env"]
    assert {"name": "fabric", "mountPath": MOUNT, "readOnly": True} in container["volumeMounts"]
    assert {"name": "fabric", "configMap": {"name": CONFIGMAP, "defaultMode": 420}} in pod["spec"]["volumes"]

    # What the kubelet made of it: admitted with the resource, the env and the read-only mount in the container.
    kubelet = seen["kubelet"]["spec"]["containers"][0]["resources"]
    assert kubelet["limits"][RESOURCE] == "1" and kubelet["requests"][RESOURCE] == "1", kubelet
    inside = seen["inside"]
    assert inside["env"] == ENV["value"], inside
    assert inside["file"] == TEXT.rstrip("\n"), inside  # $(...) drops the trailing newline
    mount = inside["mount"].split()
    assert mount[1] == MOUNT and "ro" in mount[3].split(","), inside  # read-only, as readOnly: true asked
    # The node's allocated devices: while the actor held one of four, a pod asking for four did not fit.
    scheduled = seen["scheduler"]
    print(f"scheduler on a pod asking for {ADVERTISED} {RESOURCE} meanwhile: {scheduled}")
    assert seen["still running"], "the actor pod ended before the probe's verdict: it says nothing"
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable", scheduled
    assert f"Insufficient {RESOURCE}" in scheduled["message"], scheduled

    # The rehearsal passed, with the override in place: the real Ray cluster formed, every pool ran on its role's pod.
    # (This is the session's one passing rehearsal: test_rehearsal.py's failing ones need no second Ray cluster.)
    job = get(real_node, "grpojob", name, "-n", namespace)
    assert "Preflight" in phases and "Running" in phases, phases
    assert condition(job, "Rehearsal")["status"] == "True", job["status"]["conditions"]
    assert job["status"]["rehearsal"]["passed"] is True, job["status"]["rehearsal"]
    checks = {c["name"]: c for c in job["status"]["rehearsal"]["checks"]}
    for check in ("ray.placement.global_pool", "ray.placement.rollout_pool_0", "checkpoints.shared",
                  "reward.function", "model.config", "model.tokenizer"):
        assert checks[check]["ok"], checks.get(check)
    assert "ran on its role's pods" in checks["ray.placement.global_pool"]["message"]
    assert "(actor)" in checks["ray.placement.global_pool"]["message"], checks["ray.placement.global_pool"]
    assert "(rollout)" in checks["ray.placement.rollout_pool_0"]["message"]
    # the head and one worker per role, every one on the real node, from the trainer image
    assert sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in ray_pods.values()) == [
        "head", "worker", "worker"], sorted(ray_pods)
    assert {p["spec"]["nodeName"] for p in ray_pods.values()} == {node_config.NODE_NAME}
    assert {c["image"] for p in ray_pods.values() for c in p["spec"]["containers"]} == {node_images.trainer}
    assert not job["status"].get("export")  # nothing trained, nothing exported


def test_more_of_the_resource_than_the_node_has_is_refused_before_any_pod(
        real_node: LocalCluster, overrides_namespace: str) -> None:
    namespace, name = overrides_namespace, "overrides-too-many"
    apply_job(real_node, namespace, _job(name, 5))
    try:
        wait_phase(real_node, namespace, name, "Invalid", timeout=120)
        valid = condition(get(real_node, "grpojob", name, "-n", namespace), "Valid")
        print(f"{name}: {valid['reason']}: {valid['message']}")
        assert valid["status"] == "False" and valid["reason"] == "InsufficientCapacity", valid
        assert "spec.placement.roles.actor" in valid["message"], valid["message"]
        assert f"5 {RESOURCE}" in valid["message"], valid["message"]  # what the actor asks for
        assert f"{ADVERTISED} {RESOURCE}" in valid["message"], valid["message"]  # what the node offers
        assert not items(real_node, "pods", "-n", namespace, "-l", f"{JOB_LABEL}={name}")
        assert not items(real_node, "jobs", "-n", namespace, "-l", f"{JOB_LABEL}={name}")
        assert not [r for r in items(real_node, "rayjobs", "-n", namespace) if r["metadata"]["name"].startswith(name)]
    finally:
        real_node.api.delete("grpojobs", name, namespace)
