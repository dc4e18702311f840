"""A GRPOJob becomes a role-pinned RayJob and its status follows it, against the real control plane."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import FAIL_POD_ANNOTATION
from grpo_devcluster.operator_runner import OperatorProcess, claim_manifest
from grpo_operator.reconcile.status import RAY_ORIGIN_LABEL

from .example_runs import COLOCATED, REFERENCE, ExampleRuns
from .grpojobs import apply_job, condition, example, phase, set_ray_outcome, wait_phase
from .kube import ApiError, create_namespace, get, items, wait_event, wait_for

pytestmark = pytest.mark.e2e



def _children(cluster: LocalCluster, ns: str, job: str) -> dict[str, list[str]]:
    selector = f"grpo.dev/job={job}"
    kinds = ("rayjobs", "configmaps", "serviceaccounts", "roles", "rolebindings", "jobs", "pvc", "networkpolicies")
    return {k: [o["metadata"]["name"] for o in items(cluster, k, "-n", ns, "-l", selector)] for k in kinds}


def test_reference_example_places_roles_on_gpu_nodes_and_walks_to_succeeded(
        cluster: LocalCluster, example_runs: ExampleRuns) -> None:
    ns, pods = example_runs.namespace, example_runs.role_pods
    # No nodeSelector in the example: each role on a node with GPUs (KWOK's, or the real node's advertised ones).
    gpus = {n["metadata"]["name"]: n["status"]["allocatable"].get("nvidia.com/gpu") for n in items(cluster, "nodes")}
    assert all(gpus[pods[role]["spec"]["nodeName"]] for role in ("actor", "rollout", "reward"))
    limits = pods["actor"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4" and int(limits["cpu"]) >= 12

    verl = yaml.safe_load(get(cluster, "configmap", f"{REFERENCE}-verl", "-n", ns)["data"]["verl.yaml"])
    assert verl["algorithm.adv_estimator"] == "grpo"
    assert verl["actor_rollout_ref.rollout.n"] == 8
    assert verl["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert verl["actor_rollout_ref.rollout.tensor_model_parallel_size"] == 2

    seen = example_runs.phases[REFERENCE]
    assert seen[-3:] == ["Running", "Exporting", "Succeeded"], seen
    job = get(cluster, "grpojob", REFERENCE, "-n", ns)
    assert job["status"]["export"]["path"] == "qwen2-7b-grpo"
    assert condition(job, "Exported")["status"] == "True"
    assert job["status"]["rayJobName"] == REFERENCE and job["status"]["completionTime"]
    export_job = get(cluster, "job", f"{REFERENCE}-export", "-n", ns)
    container = export_job["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/checkpoints"]["readOnly"] is True
    assert mounts["/export"].get("readOnly", False) is False  # false is omitted by the apiserver
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_colocated_example_succeeds_without_a_converter(cluster: LocalCluster, example_runs: ExampleRuns) -> None:
    ns, seen = example_runs.namespace, example_runs.phases[COLOCATED]
    assert "Running" in seen and "Exporting" not in seen
    assert _children(cluster, ns, COLOCATED)["jobs"] == [f"{COLOCATED}-preflight"]
    groups = get(cluster, "rayjob", COLOCATED, "-n", ns)["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["resources"]) for g in groups] == [("actor", {"grpo.dev/actor": "8"})]


def test_each_example_gets_an_owned_network_policy_selecting_only_its_pods(
        cluster: LocalCluster, example_runs: ExampleRuns) -> None:
    """What the apiserver holds, not enforcement: the session's CNI enforces no NetworkPolicy
    (docs/security.md#network-policy)."""
    ns = example_runs.namespace
    for name in (COLOCATED, REFERENCE):
        assert _children(cluster, ns, name)["networkpolicies"] == [name]
        policy, job = get(cluster, "networkpolicy", name, "-n", ns), get(cluster, "grpojob", name, "-n", ns)
        (owner,) = policy["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == (
            "GRPOJob", name, job["metadata"]["uid"], True)
        assert policy["spec"]["policyTypes"] == ["Ingress"]
    selector = get(cluster, "networkpolicy", REFERENCE, "-n", ns)["spec"]["podSelector"]["matchLabels"]
    # The reference job's Ray pods as they ran (recorded while all three roles were up) ...
    for role, pod in example_runs.role_pods.items():
        assert selector.items() <= pod["metadata"]["labels"].items(), role
    # ... and not the other job's pods (its preflight pod stays for its log).
    others = items(cluster, "pods", "-n", ns, "-l", f"grpo.dev/job={COLOCATED}")
    assert others and not any(selector.items() <= p["metadata"]["labels"].items() for p in others)


def test_failed_rayjob_fails_the_grpojob_with_its_reason(cluster: LocalCluster, team_ns: str) -> None:
    set_ray_outcome(cluster, team_ns, COLOCATED, "FAILED", "vLLM engine died: CUDA out of memory")
    apply_job(cluster, team_ns, example("colocated-length"))
    wait_phase(cluster, team_ns, COLOCATED, "Failed")
    ready = condition(get(cluster, "grpojob", COLOCATED, "-n", team_ns), "Ready")
    assert ready["reason"] == "AppFailed"
    assert "CUDA out of memory" in ready["message"]
    wait_event(cluster, team_ns, COLOCATED, "AppFailed")


def test_failing_converter_fails_the_grpojob_with_its_message(cluster: LocalCluster, team_ns: str) -> None:
    body = example("reference-disaggregated",
                   podMetadata={"annotations": {FAIL_POD_ANNOTATION: "checkpoint is missing rank 3 of 4"}})
    apply_job(cluster, team_ns, body)
    seen = wait_phase(cluster, team_ns, REFERENCE, "Failed", timeout=180)
    assert "Exporting" in seen
    ready = condition(get(cluster, "grpojob", REFERENCE, "-n", team_ns), "Ready")
    assert ready["reason"] == "ExportFailed"
    assert "missing rank 3 of 4" in ready["message"]


INVALID = [
    ("length reward with a reward pool", "reference-disaggregated",
     {"reward": {"type": "length"}}, "a length reward runs on CPU; remove placement.roles.reward"),
    ("function reward with a reward pool", "reference-disaggregated",
     {"reward": {"type": "function", "function": {"configMapName": "r", "key": "reward.py"}}},
     "a function reward runs on CPU"),
    ("rollout GPUs not a multiple of TP", "reference-disaggregated",
     {"rollout": {"tensorParallelSize": 4}}, "multiple of rollout.tensorParallelSize"),
    ("role larger than a node", "colocated-length",
     {"placement": {"mode": "colocated", "roles": {"actor": {"gpus": 16}}}}, "gpusPerNode"),
    ("both steps and epochs", "colocated-length", {"training": {"totalSteps": 10, "epochs": 2}}, "epochs"),
    ("export without target", "colocated-length", {"export": {"enabled": True}}, "export.target"),
    ("group size zero", "colocated-length", {"algorithm": {"groupSize": 0}}, "groupSize"),
    ("unknown placement mode", "colocated-length", {"placement": {"mode": "sharded"}}, "mode"),
    ("claim and size together", "colocated-length",
     {"checkpoints": {"volume": {"claimName": "ckpt", "size": "1Ti"}}}, "claimName"),
    ("absolute model path", "colocated-length", {"model": {"claimName": "models", "path": "/etc/passwd"}}, "path"),
    # The cases that used to pass `kubectl apply` and fail on 8 GPUs inside the trainer.
    ("temperature zero", "colocated-length", {"rollout": {"temperature": 0}}, "rollout.temperature=0 samples greedily"),
    ("step not divisible by the actor GPUs", "colocated-length",
     {"data": {"claimName": "datasets", "trainFiles": ["p.jsonl"], "trainBatchSize": 9},
      "algorithm": {"groupSize": 3}}, "data.trainBatchSize x algorithm.groupSize (the sequences of one step)"),
    ("update not divisible by the actor GPUs", "colocated-length",
     {"data": {"claimName": "datasets", "trainFiles": ["p.jsonl"], "trainBatchSize": 10},
      "algorithm": {"miniBatchSize": 5, "microBatchSizePerGPU": 1},
      "placement": {"mode": "colocated", "roles": {"actor": {"gpus": 8, "replicas": 2}}}},
     "algorithm.miniBatchSize (default data.trainBatchSize) x algorithm.groupSize"),
    ("micro batch not dividing a GPU's share", "colocated-length",
     {"data": {"claimName": "datasets", "trainFiles": ["p.jsonl"], "trainBatchSize": 32},
      "algorithm": {"microBatchSizePerGPU": 3}}, "algorithm.microBatchSizePerGPU must divide"),
    ("gpu memory utilization 1.0 colocated", "colocated-length", {"rollout": {"gpuMemoryUtilization": 1.0}},
     "rollout.gpuMemoryUtilization must be below 1.0"),
    # Pod overrides (issue 32): what would break the job is refused with the field and the fix.
    ("override mounting over the checkpoints", "colocated-length",
     {"pods": {"actor": {"volumes": [{"name": "x", "mountPath": "/checkpoints/x", "emptyDir": {}}]}}},
     "mountPath is one of the operator's own mount points"),
    ("override volume with two sources", "colocated-length",
     {"pods": {"actor": {"volumes": [{"name": "x", "mountPath": "/x", "emptyDir": {},
                                      "secret": {"secretName": "s"}}]}}},
     "each volume takes exactly one of emptyDir"),
    ("override asking for GPUs", "colocated-length", {"pods": {"actor": {"resources": {"nvidia.com/gpu": 8}}}},
     "CPU, memory and GPUs come from placement.roles.<role>"),
    ("override setting the operator's env", "colocated-length",
     {"pods": {"head": {"env": [{"name": "GRPO_JOB_NAME", "value": "x"}]}}}, "may not set GRPO_* or RAY_* variables"),
    ("preflight override with hostNetwork", "colocated-length", {"pods": {"preflight": {"hostNetwork": True}}},
     "pods.preflight takes env, volumes, labels, annotations, tolerations and nodeAffinity only"),
    ("efa without its devices", "colocated-length", {"network": {"mode": "efa"}},
     "network.mode: efa needs network.efa.devicesPerPod"),
]


@pytest.fixture(scope="module")
def refusal_ns(cluster: LocalCluster, grpo_operator: OperatorProcess) -> Iterator[str]:
    """One namespace for the refusals: each is a server-side dry run, which stores nothing."""
    yield create_namespace(cluster, "refusals")
    cluster.api.delete("namespaces", "refusals")


@pytest.mark.parametrize(("case", "base", "change", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_manifest_is_refused_by_the_apiserver_naming_the_fix(cluster: LocalCluster, refusal_ns: str,
                                                                      case: str, base: str, change: dict,
                                                                      message: str) -> None:
    body = example(base, **change)
    with pytest.raises(ApiError) as refused:
        cluster.api.create({**body, "metadata": {**body["metadata"], "namespace": refusal_ns}}, dry_run=True)
    assert refused.value.status == 422, case
    assert message in refused.value.message  # what `kubectl apply` prints


def test_an_invalid_manifest_is_refused_at_kubectl_apply_and_leaves_nothing(cluster: LocalCluster,
                                                                            team_ns: str) -> None:
    """The refusal as a user meets it, for real (no dry run): kubectl's error names the fix, nothing is stored,
    and the operator creates nothing."""
    _, base, change, message = INVALID[0]
    body = example(base, **change)
    result = cluster.kubectl("apply", "-n", team_ns, "-f", "-", input=yaml.safe_dump(body), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert cluster.kubectl("get", "grpojobs", "-n", team_ns, "-o", "name").stdout.strip() == ""
    assert all(v == [] for v in _children(cluster, team_ns, body["metadata"]["name"]).values())


@pytest.mark.parametrize(("what", "change", "reason", "text"), [
    ("missing model claim", {"model": {"claimName": "no-such-models", "path": "m"}},
     "MissingPersistentVolumeClaim", "spec.model.claimName: PersistentVolumeClaim 'no-such-models'"),
    ("missing data claim", {"data": {"claimName": "no-such-datasets", "trainFiles": ["prompts/train.jsonl"]}},
     "MissingPersistentVolumeClaim", "spec.data.claimName: PersistentVolumeClaim 'no-such-datasets'"),
    ("missing reward ConfigMap",
     {"reward": {"type": "function", "function": {"configMapName": "my-reward", "key": "reward.py"}}},
     "MissingConfigMap", "kubectl create configmap my-reward --from-file=reward.py"),
])
def test_missing_cluster_objects_mark_the_job_invalid_and_create_nothing(
        cluster: LocalCluster, team_ns: str, what: str, change: dict, reason: str, text: str) -> None:
    apply_job(cluster, team_ns, example("colocated-length", **change))
    wait_phase(cluster, team_ns, COLOCATED, "Invalid")
    job = get(cluster, "grpojob", COLOCATED, "-n", team_ns)
    assert condition(job, "Valid")["reason"] == reason
    assert text in condition(job, "Valid")["message"]
    wait_event(cluster, team_ns, COLOCATED, reason, kind=None)
    assert all(v == [] for v in _children(cluster, team_ns, COLOCATED).values()), what


def test_job_waiting_for_a_claim_starts_once_it_exists(cluster: LocalCluster, team_ns: str) -> None:
    apply_job(cluster, team_ns, example("colocated-length", model={"claimName": "late-models", "path": "m"}))
    wait_phase(cluster, team_ns, COLOCATED, "Invalid")
    cluster.apply(claim_manifest(team_ns, "late-models", "1Gi"))
    wait_phase(cluster, team_ns, COLOCATED, "Running", timeout=150)  # started: its RayJob runs


def test_deleting_a_grpojob_removes_children_but_keeps_checkpoints(cluster: LocalCluster, team_ns: str) -> None:
    set_ray_outcome(cluster, team_ns, COLOCATED, "RUNNING", "still training", after_seconds=0)
    apply_job(cluster, team_ns, example("colocated-length"))
    wait_phase(cluster, team_ns, COLOCATED, "Running")
    wait_for("RayCluster", lambda: items(cluster, "rayclusters", "-n", team_ns))
    # The selector Ready's message gave while the job was Pending finds the RayCluster, and the status names it
    # now that the job runs (recorded with the Running write, not in one of its own).
    job = get(cluster, "grpojob", COLOCATED, "-n", team_ns)
    found = items(cluster, "rayclusters", "-n", team_ns, "-l", f"{RAY_ORIGIN_LABEL}={COLOCATED}")
    assert [c["metadata"]["name"] for c in found] == [job["status"]["rayClusterName"]]
    assert job["status"]["startTime"]
    # The preflight Job (kept for its log) is among the children that go with the GRPOJob.
    assert f"{COLOCATED}-preflight" in _children(cluster, team_ns, COLOCATED)["jobs"]
    cluster.kubectl("delete", "grpojob", COLOCATED, "-n", team_ns)
    wait_for("children garbage-collected", lambda: not any(
        items(cluster, kind, "-n", team_ns, "-l", f"grpo.dev/job={COLOCATED}")
        for kind in ("rayjobs", "rayclusters", "configmaps", "serviceaccounts", "jobs", "pods", "networkpolicies")))
    pvc = get(cluster, "pvc", f"{COLOCATED}-checkpoints", "-n", team_ns)
    assert not pvc["metadata"].get("ownerReferences")


def test_suspend_then_resume(cluster: LocalCluster, team_ns: str) -> None:
    body = example("colocated-length")
    body["spec"]["scheduling"] = {**body["spec"].get("scheduling", {}), "suspend": True}
    apply_job(cluster, team_ns, body)
    wait_phase(cluster, team_ns, COLOCATED, "Suspended")
    # No Ray pods; the finished preflight pod holds nothing (and stays for its log).
    assert items(cluster, "pods", "-n", team_ns, "-l",
                 f"grpo.dev/job={COLOCATED},app.kubernetes.io/component!=preflight") == []
    cluster.kubectl("patch", "grpojob", COLOCATED, "-n", team_ns, "--type=merge",
                    "-p", '{"spec":{"scheduling":{"suspend":false}}}')
    wait_phase(cluster, team_ns, COLOCATED, "Running", timeout=150)  # resumed: its RayJob runs


def test_kubectl_explain_shows_placement_docs(cluster: LocalCluster, grpo_operator: OperatorProcess) -> None:
    text = cluster.kubectl("explain", "grpojob.spec.placement").stdout
    assert "colocated" in text and "disaggregated" in text
    assert "roles" in text and "gpusPerNode" in text


def test_printer_columns_show_phase(cluster: LocalCluster, example_runs: ExampleRuns) -> None:
    table = cluster.kubectl("get", "grpojobs", "-n", example_runs.namespace).stdout
    assert table.split("\n")[0].split()[:4] == ["NAME", "PHASE", "STEP", "REWARD"]
    assert "Succeeded" in table


def test_operator_metrics_count_jobs_by_phase(cluster: LocalCluster, example_runs: ExampleRuns,
                                             grpo_operator: OperatorProcess) -> None:
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(grpo_operator.metrics_url, timeout=5).read().decode()
    succeeded = [line for line in text.splitlines() if line.startswith('grpo_operator_jobs{phase="Succeeded"}')]
    assert succeeded and float(succeeded[0].split()[-1]) >= 1
    assert "grpo_operator_reconcile_total" in text
    assert phase(cluster, example_runs.namespace, COLOCATED) == "Succeeded"
