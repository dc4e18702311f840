"""Both examples, applied as the README says, on a cluster as unkind as GKE: zones, GPU Feature Discovery labels and
no label of ours, GPU nodes tainted with ExtendedResourceToleration admitting, GPUs in one zone only, zonal
WaitForFirstConsumer disks by default, and a GPU pool on a driver too old for the trainer image.

Each test names the first-hour failure of issue 30 it guards; each failed on the code before its fix (said per test).
"""

from __future__ import annotations

from grpo_devcluster import cloud_profile as cloud
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess, prepare_job_namespace

from ..example_runs import COLOCATED, REFERENCE, ROLES, ExampleRuns, run_examples
from ..grpojobs import apply_job, example
from ..kube import create_namespace, get, items, wait_object

GPU_ZONE = cloud.ZONES[2]


def _ready(job: dict | None) -> dict:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def _zone(cluster: LocalCluster, node: str) -> str:
    return get(cluster, "node", node)["metadata"]["labels"][cloud.ZONE_LABEL]


def test_the_profile_is_a_gke_gpu_cluster(cloud_cluster: LocalCluster) -> None:
    nodes = items(cloud_cluster, "nodes")
    assert {n["metadata"]["labels"][cloud.ZONE_LABEL] for n in nodes} == set(cloud.ZONES)
    assert not any("grpo.dev/pool" in n["metadata"]["labels"] for n in nodes)
    gpu = [n for n in nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert {n["metadata"]["labels"][cloud.ZONE_LABEL] for n in gpu} == {cloud.ZONES[1], GPU_ZONE}
    assert all(n["spec"]["taints"] == [cloud.GPU_TAINT] for n in gpu)
    assert {n["metadata"]["labels"][cloud.GFD_DRIVER_MAJOR] for n in gpu} == {"535", "580"}
    (default,) = [c for c in items(cloud_cluster, "storageclasses")
                  if c["metadata"].get("annotations", {}).get("storageclass.kubernetes.io/is-default-class")]
    assert default["volumeBindingMode"] == "WaitForFirstConsumer"


def test_gpu_pods_get_the_taints_toleration_from_the_apiserver_and_zonal_disks_follow_their_pod(
        cloud_cluster: LocalCluster) -> None:
    namespace = create_namespace(cloud_cluster, "profile-check")
    cloud_cluster.apply([
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "disk", "namespace": namespace},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu", "namespace": namespace},
         "spec": {"nodeSelector": {cloud.GFD_DRIVER_MAJOR: "580"},
                  "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                  "volumeMounts": [{"name": "disk", "mountPath": "/disk"}]}],
                  "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": "disk"}}]}},
    ])
    pod = wait_object(cloud_cluster, "pods", "gpu", namespace,
                      lambda p: p if (p or {}).get("status", {}).get("phase") == "Running" else None, 60,
                      "the GPU pod running")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    claim = get(cloud_cluster, "pvc", "disk", "-n", namespace)
    volume = get(cloud_cluster, "pv", claim["spec"]["volumeName"])
    assert volume["metadata"]["labels"][cloud.ZONE_LABEL] == _zone(cloud_cluster, pod["spec"]["nodeName"]) == GPU_ZONE


def test_both_examples_run_unchanged_with_gpus_in_one_zone(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess) -> None:
    """Failures 1, 2, 4 and 9: before the fixes both jobs were refused with InsufficientCapacity (the examples
    selected `grpo.dev/pool`, and the GPU taint counted as untolerated); with those fixed, the preflight pod bound
    each new checkpoint claim in zone a or b and the actor, whose GPUs are all in zone c, stayed Pending."""
    runs: ExampleRuns = run_examples(cloud_cluster, namespace="cloud-examples")
    for job in (COLOCATED, REFERENCE):
        assert runs.phases[job][-1] == "Succeeded", runs.phases[job]
        claim = get(cloud_cluster, "pvc", f"{job}-checkpoints", "-n", runs.namespace)
        volume = get(cloud_cluster, "pv", claim["spec"]["volumeName"])
        assert volume["metadata"]["labels"][cloud.ZONE_LABEL] == GPU_ZONE  # bound where the actor ran
    nodes = {role: runs.role_pods[role]["spec"]["nodeName"] for role in (*ROLES, "head")}
    # Every GPU worker on an H100 of zone c, none on the old-driver pool of zone b; the head on the actor's node.
    assert {role: _zone(cloud_cluster, node) for role, node in nodes.items()} == dict.fromkeys(nodes, GPU_ZONE)
    assert all(node.startswith(cloud.GPU_POOL) for node in nodes.values()) and nodes["head"] == nodes["actor"]
    preflight = items(cloud_cluster, "jobs", "-n", runs.namespace, "-l", "app.kubernetes.io/component=preflight")
    for job in preflight:  # one Pod Security builder: ownership changed only where a volume's root differs
        assert job["spec"]["template"]["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"


def test_a_pool_whose_driver_is_too_old_is_named_before_any_gpu_is_taken(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess) -> None:
    """Failure 7: before the fix the job was accepted (once the GPU taint was tolerated) and its pods went to the
    old-driver nodes, where the first CUDA call would have failed with the GPUs held."""
    namespace = prepare_job_namespace(cloud_cluster, "old-driver")
    body = example("colocated-length")
    body["spec"]["placement"]["roles"]["actor"]["nodeSelector"] = {cloud.NODE_POOL_LABEL: cloud.OLD_DRIVER_POOL}
    apply_job(cloud_cluster, namespace, body)
    job = wait_object(cloud_cluster, "grpojobs", COLOCATED, namespace,
                      lambda j: j if _ready(j).get("reason") == "DriverTooOld" else None, 60,
                      "the job's Ready condition saying DriverTooOld")
    message = _ready(job)["message"]
    assert f"{cloud.NODE_POOL_LABEL}={cloud.OLD_DRIVER_POOL} (driver 535)" in message
    assert "older than 580" in message
    assert items(cloud_cluster, "pods", "-n", namespace) == []  # nothing holds a GPU, nothing was started
