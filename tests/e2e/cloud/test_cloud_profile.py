"""Both examples, applied as the README says, on a cluster as unkind as GKE: zones, GPU Feature Discovery labels and
no label of ours, GPU nodes tainted with ExtendedResourceToleration admitting, GPUs in one zone only (one static node
and a Karpenter pool that starts at zero), zonal WaitForFirstConsumer disks by default, and a GPU pool on a driver too
old for the trainer image.

Each test names the first-hour failure of issue 30 it guards; each failed on the code before its fix (said per test).
File order matters: the pool-from-zero test runs while Karpenter has made no node yet.
"""

from __future__ import annotations

from pathlib import Path

from grpo_devcluster import cloud_profile as cloud
from grpo_devcluster import karpenter, kueue
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess, prepare_job_namespace
from grpo_operator.plan import parse_quantity
from preflight_pod import QWEN2_7B_SHAPE

from ..example_runs import COLOCATED, REFERENCE, ExampleRuns, run_examples
from ..grpojobs import apply_job, example, set_ray_outcome, wait_phase
from ..kube import create_namespace, delete_namespace, get, items, wait_event, wait_object
from ..test_preflight import real_verdict, with_verdict

GPU_ZONE = cloud.ZONES[2]


def _condition(job: dict | None, kind: str) -> dict:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def _ready(job: dict | None) -> dict:
    return _condition(job, "Ready")


def _pods_waiting(reason: str):
    def check(job: dict | None) -> dict | None:
        found = _condition(job, "PodsReady")
        return found if found.get("status") == "False" and found.get("reason") == reason else None
    return check


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
    # The autoscaled GPU pool holds no node until a pod asks for one.
    assert get(cloud_cluster, "nodepool", karpenter.PROFILE_POOL.name)["spec"]["limits"] == {"nvidia.com/gpu": "16"}
    assert not any("karpenter.sh/nodepool" in n["metadata"]["labels"] for n in nodes)


def test_a_job_for_a_pool_at_zero_nodes_waits_for_karpenter_then_runs(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess) -> None:
    """Failure 3: before the fix the job was Invalid (InsufficientCapacity: no node carries the pool's label) and
    no pod was created, so Karpenter never had a pod to add a node for."""
    namespace = prepare_job_namespace(cloud_cluster, "from-zero")
    body = example("colocated-length")
    body["spec"]["placement"]["roles"]["actor"]["nodeSelector"] = {cloud.NODE_POOL_LABEL: karpenter.PROFILE_POOL.name}
    apply_job(cloud_cluster, namespace, body)
    waiting = wait_object(cloud_cluster, "grpojobs", COLOCATED, namespace, _pods_waiting("WaitingForCapacity"), 60,
                          "PodsReady False with WaitingForCapacity")
    assert f"Karpenter NodePool {karpenter.PROFILE_POOL.name}" in waiting["message"]
    phases = wait_phase(cloud_cluster, namespace, COLOCATED, "Succeeded", 180)
    assert "Invalid" not in phases
    claims = get(cloud_cluster, "pvc", f"{COLOCATED}-checkpoints", "-n", namespace)
    volume = get(cloud_cluster, "pv", claims["spec"]["volumeName"])
    added = [n for n in items(cloud_cluster, "nodes")
             if n["metadata"]["labels"].get("karpenter.sh/nodepool") == karpenter.PROFILE_POOL.name]
    assert added and volume["metadata"]["labels"][cloud.ZONE_LABEL] == GPU_ZONE
    job = get(cloud_cluster, "grpojob", COLOCATED, "-n", namespace)
    assert _condition(job, "PodsReady")["status"] == "True"  # said to be over once it ran
    delete_namespace(cloud_cluster, namespace)


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
    delete_namespace(cloud_cluster, namespace)  # its GPUs back for the examples


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
    for pods in (runs.role_pods, runs.colocated_pods):
        nodes = {role: get(cloud_cluster, "node", pod["spec"]["nodeName"]) for role, pod in pods.items()}
        # Every GPU worker on an H100 of zone c (static or Karpenter's), none on the old-driver pool of zone b; the
        # head on the actor's node, which it could not reach without the GPU taint's toleration.
        assert {n["metadata"]["labels"][cloud.ZONE_LABEL] for n in nodes.values()} == {GPU_ZONE}
        assert {n["metadata"]["labels"][cloud.GFD_PRODUCT] for n in nodes.values()} == {cloud.H100.product}
        assert nodes["head"]["metadata"]["name"] == nodes["actor"]["metadata"]["name"]
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


def test_a_pod_no_node_can_take_is_said_with_the_schedulers_message(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess) -> None:
    """Failure 6 (Unschedulable): the static H100 node is full and no autoscaler makes nodes of its pool; before the
    fix the job sat in Pending with nothing on it."""
    namespace = prepare_job_namespace(cloud_cluster, "unschedulable")
    static = {cloud.NODE_POOL_LABEL: cloud.GPU_POOL}
    holder = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    cloud_cluster.apply({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "holds-the-gpus", "namespace": namespace},
                         "spec": {"nodeSelector": static, "containers": [holder]}})
    wait_object(cloud_cluster, "pods", "holds-the-gpus", namespace,
                lambda p: p if (p or {}).get("status", {}).get("phase") == "Running" else None, 60, "the GPUs held")
    body = example("colocated-length")
    body["spec"]["placement"]["roles"]["actor"]["nodeSelector"] = static
    apply_job(cloud_cluster, namespace, body)
    found = wait_object(cloud_cluster, "grpojobs", COLOCATED, namespace, _pods_waiting("Unschedulable"), 90,
                        "PodsReady False with Unschedulable")
    assert "(the actor's Ray worker): Unschedulable: 0/" in found["message"]
    assert "Insufficient nvidia.com/gpu" in found["message"]
    delete_namespace(cloud_cluster, namespace)


def test_queued_jobs_take_the_quota_in_turn_and_every_job_of_theirs_is_admitted(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess) -> None:
    """Failure 8: in a namespace where Kueue manages unlabelled Jobs, the preflight Job carried no queue label before
    the fix and was suspended for good: the job sat in Preflight. Now every Job and the RayJob carry the job's queue;
    the second job waits for the quota with Kueue's words on it, and runs once the first is gone."""
    namespace = prepare_job_namespace(cloud_cluster, "queued")
    cloud_cluster.api.patch("namespaces", namespace, None, {"metadata": {"labels": cloud.KUEUE_MANAGED}})
    cloud_cluster.apply(kueue.local_queue("team", namespace, cloud.CLUSTER_QUEUE))
    first, second = example("colocated-length", scheduling={"queueName": "team"}), \
        example("colocated-length", scheduling={"queueName": "team"})
    first["metadata"]["name"], second["metadata"]["name"] = "first", "second"
    set_ray_outcome(cloud_cluster, namespace, "first", "RUNNING", "still training", after_seconds=0)
    apply_job(cloud_cluster, namespace, first)
    wait_phase(cloud_cluster, namespace, "first", "Running", 120)
    apply_job(cloud_cluster, namespace, second)

    def waits_in_queue(job: dict | None) -> dict | None:
        found = _condition(job, "QueueAdmitted")
        return found if found.get("status") == "False" and "training RayJob" in found.get("message", "") else None

    queued = wait_object(cloud_cluster, "grpojobs", "second", namespace, waits_in_queue, 90, "QueueAdmitted False")
    assert "waits in Kueue's LocalQueue team" in queued["message"]
    assert "insufficient unused quota for nvidia.com/gpu" in queued["message"]
    wait_event(cloud_cluster, namespace, "second", "WaitingInQueue")
    for name in ("first", "second"):  # every child that runs pods was queued, the preflight Job included
        job = get(cloud_cluster, "job", f"{name}-preflight", "-n", namespace)
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"

    cloud_cluster.api.delete("grpojobs", "first", namespace)
    wait_phase(cloud_cluster, namespace, "second", "Succeeded", 120)
    assert _condition(get(cloud_cluster, "grpojob", "second", "-n", namespace), "QueueAdmitted")["status"] == "True"
    delete_namespace(cloud_cluster, namespace)


def test_the_colocated_examples_checkpoint_claim_holds_keep_plus_one_checkpoints(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess, tmp_path: Path) -> None:
    """Failure 5: the colocated example keeps 3 checkpoints of Qwen2-7B (about 85 GiB each) and its claim was the
    default 100Gi, so the second save failed. With the preflight's verdict on a Qwen2-7B-shaped model (computed by
    grpo-train's own preflight, as test_preflight.py does), the claim is created after it, sized for 4 of them,
    as a zonal disk in the actor's zone."""
    namespace = prepare_job_namespace(cloud_cluster, "sized")
    body = example("colocated-length")
    apply_job(cloud_cluster, namespace, with_verdict(body, real_verdict(tmp_path, body, passing=True,
                                                                         shape=QWEN2_7B_SHAPE)))
    wait_phase(cloud_cluster, namespace, COLOCATED, "Succeeded", 180)
    claim = get(cloud_cluster, "pvc", f"{COLOCATED}-checkpoints", "-n", namespace)
    assert parse_quantity(claim["spec"]["resources"]["requests"]["storage"]) >= 4 * 85 * 2**30
    volume = get(cloud_cluster, "pv", claim["spec"]["volumeName"])
    assert volume["metadata"]["labels"][cloud.ZONE_LABEL] == GPU_ZONE
    delete_namespace(cloud_cluster, namespace)
