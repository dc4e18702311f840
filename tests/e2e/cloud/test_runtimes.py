"""GRPORuntime on the cloud-like cluster (issue 32): a runtime an admin marks default carries the queue and a pool's
toleration; two jobs take it, one overriding a field; both get the right pods; editing the runtime reaches the next
job and never the running one.

Here rather than in the KWOK tier: the queue means something only where Kueue admits by it (this profile's
ClusterQueue of 8 GPUs), and a default runtime is cluster-wide, so it lives in this package's own cluster, for this
test only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from grpo_devcluster import cloud_profile as cloud
from grpo_devcluster import kueue
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess, prepare_job_namespace

from ..grpojobs import apply_job, example, set_ray_outcome, wait_phase
from ..kube import delete_namespace, get, items, wait_object

RUNTIME = "gke-h100"
DEDICATED = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _runtime(value: str) -> dict:
    return {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPORuntime", "metadata": {"name": RUNTIME},
            "spec": {"default": True, "queueName": "team", "monitoring": {"klGrowthFactor": 6},
                     "pods": {"actor": {"tolerations": [DEDICATED], "labels": {"team": "ml"},
                                        "env": [{"name": "RT_VALUE", "value": value}]}}}}


@pytest.fixture
def default_runtime(cloud_cluster: LocalCluster) -> Iterator[str]:
    cloud_cluster.apply(_runtime("v1"))
    yield RUNTIME
    cloud_cluster.api.delete("grporuntimes", RUNTIME)  # cluster-wide: the package's later jobs must not take it


def _actor_template(cluster: LocalCluster, namespace: str, job: str) -> dict:
    rayjob = get(cluster, "rayjob", job, "-n", namespace)
    groups = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    return next(g for g in groups if g["groupName"] == "actor")["template"]


def _env(template: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in template["spec"]["containers"][0]["env"]}


def test_two_jobs_take_the_default_runtime_one_overriding_a_field_and_an_edit_reaches_only_the_next(
        cloud_cluster: LocalCluster, cloud_operator: OperatorProcess, default_runtime: str) -> None:
    namespace = prepare_job_namespace(cloud_cluster, "runtime-jobs")
    cloud_cluster.api.patch("namespaces", namespace, None, {"metadata": {"labels": cloud.KUEUE_MANAGED}})
    cloud_cluster.apply(kueue.local_queue("team", namespace, cloud.CLUSTER_QUEUE))
    first = example("colocated-length")  # names no runtime, no queue: both from the default runtime
    first["metadata"]["name"] = "first"
    set_ray_outcome(cloud_cluster, namespace, "first", "RUNNING", "still training", after_seconds=0)
    apply_job(cloud_cluster, namespace, first)
    wait_phase(cloud_cluster, namespace, "first", "Running", 120)

    taken = get(cloud_cluster, "grpojob", "first", "-n", namespace)["status"]["runtime"]
    assert (taken["name"], taken["generation"]) == (RUNTIME, 1)
    assert {"scheduling.queueName", "pods.actor", "monitoring.klGrowthFactor"} <= set(taken["fromRuntime"])
    assert get(cloud_cluster, "rayjob", "first", "-n", namespace)["metadata"]["labels"][QUEUE_LABEL] == "team"
    pods = items(cloud_cluster, "pods", "-n", namespace, "-l", "grpo.dev/job=first,grpo.dev/role=actor")
    assert pods and all(p["status"]["phase"] == "Running" for p in pods)
    for pod in pods:  # the running pods, not only the template, carry what the runtime gave
        assert DEDICATED in pod["spec"]["tolerations"]
        assert pod["metadata"]["labels"]["team"] == "ml"
        assert {"name": "RT_VALUE", "value": "v1"} in pod["spec"]["containers"][0]["env"]

    # The admin edits the runtime while `first` trains; `second` names it and overrides one of its env values.
    cloud_cluster.apply(_runtime("v2"))
    second = example("colocated-length", runtime=RUNTIME,
                     pods={"actor": {"env": [{"name": "RT_VALUE", "value": "second's own"}]}})
    second["metadata"]["name"] = "second"
    apply_job(cloud_cluster, namespace, second)
    def waits_in_queue(job: dict | None) -> dict | None:
        conditions = ((job or {}).get("status") or {}).get("conditions") or []
        return job if any(c["type"] == "QueueAdmitted" and c["status"] == "False"
                          and "training RayJob" in c.get("message", "") for c in conditions) else None

    queued = wait_object(cloud_cluster, "grpojobs", "second", namespace, waits_in_queue, 120,
                         "second's RayJob waiting in the runtime's queue")
    assert (queued["status"]["runtime"]["generation"], queued["status"]["runtime"]["name"]) == (2, RUNTIME)
    assert "pods.actor.env" in queued["status"]["runtime"]["merged"]
    assert "waits in Kueue's LocalQueue team" in next(
        c for c in queued["status"]["conditions"] if c["type"] == "QueueAdmitted")["message"]

    template = _actor_template(cloud_cluster, namespace, "second")
    assert _env(template)["RT_VALUE"] == "second's own"  # the job's own value over the runtime's
    assert DEDICATED in template["spec"]["tolerations"] and template["metadata"]["labels"]["team"] == "ml"
    assert get(cloud_cluster, "rayjob", "second", "-n", namespace)["metadata"]["labels"][QUEUE_LABEL] == "team"

    running = get(cloud_cluster, "grpojob", "first", "-n", namespace)
    assert running["status"]["runtime"]["generation"] == 1  # the running job keeps what it took
    assert _env(_actor_template(cloud_cluster, namespace, "first"))["RT_VALUE"] == "v1"
    assert [p["spec"]["containers"][0]["env"] for p in items(
        cloud_cluster, "pods", "-n", namespace, "-l", "grpo.dev/job=first,grpo.dev/role=actor")] == [
        p["spec"]["containers"][0]["env"] for p in pods]  # the same pods, untouched

    cloud_cluster.api.delete("grpojobs", "first", namespace)
    wait_phase(cloud_cluster, namespace, "second", "Succeeded", 150)
    delete_namespace(cloud_cluster, namespace)
