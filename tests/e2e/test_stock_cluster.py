"""What a new user on a stock managed cluster meets first, against the real control plane: KubeRay's
submitter pod carrying the job's settings, the apiserver's "restricted" Pod Security admission, a
claim that cannot bind, per-job checkpoint directories, and honest status after the last retry."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import OperatorProcess, claim_manifest

from .example_runs import COLOCATED, REFERENCE, ExampleRuns
from .grpojobs import apply_job, condition, example, set_attempts, set_ray_outcome, wait_phase
from .kube import ApiError, create_namespace, get, items, wait_event, wait_for

pytestmark = pytest.mark.e2e

@pytest.fixture
def priority_class(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A PriorityClass of this test's own (cluster-scoped: a unique name, deleted afterwards)."""
    name = f"grpo-e2e-{uuid.uuid4().hex[:8]}"
    cluster.api.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                       "value": 1000})
    yield name
    cluster.api.delete("priorityclasses", name)


@pytest.fixture
def unserved_class(cluster: LocalCluster) -> Iterator[str]:
    """A StorageClass whose provisioner nobody runs: its claims stay Pending, as RWX ones do on EBS."""
    name = f"unserved-{uuid.uuid4().hex[:8]}"
    cluster.api.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                       "provisioner": "devcluster.grpo.dev/nobody", "volumeBindingMode": "Immediate"})
    yield name
    cluster.api.delete("storageclasses", name)


# --------------------------------------------------------------------------- item 1: the submitter


def test_the_submitter_job_kuberay_creates_carries_the_jobs_settings(cluster: LocalCluster, team_ns: str,
                                                                    priority_class: str) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "team-sa", "namespace": team_ns}})
    set_ray_outcome(cluster, team_ns, COLOCATED, "RUNNING", "still training", after_seconds=0)
    head = {"nodeSelector": {"grpo.dev/pool": "train"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "grpo", "effect": "NoSchedule"}]}
    body = example("colocated-length", imagePullSecrets=[{"name": "regcred"}], serviceAccountName="team-sa",
                   scheduling={"priorityClassName": priority_class}, podMetadata={"labels": {"team": "research"}})
    body["spec"]["placement"]["head"] = head
    apply_job(cluster, team_ns, body)

    job = wait_for("KubeRay's submitter Job", lambda: items(cluster, "jobs", "-n", team_ns, "--field-selector",
                                                           f"metadata.name={COLOCATED}"), timeout=120)[0]
    template = job["spec"]["template"]
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "team-sa"
    assert pod["priorityClassName"] == priority_class
    assert pod["nodeSelector"] == head["nodeSelector"] and pod["tolerations"] == head["tolerations"]
    assert template["metadata"]["labels"]["grpo.dev/job"] == COLOCATED
    assert template["metadata"]["labels"]["team"] == "research"
    (container,) = pod["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsUser"] == 1000
    # KubeRay wrote its submit-and-follow script into our container, which has no command of its own.
    assert "ray job submit" in " ".join(container.get("args") or [])
    # The pod exists: the apiserver admitted it with the job's account and priority.
    submitter = wait_for("the submitter pod", lambda: items(
        cluster, "pods", "-n", team_ns, "-l", f"grpo.dev/job={COLOCATED},app.kubernetes.io/component=submitter"))
    assert submitter[0]["spec"]["priority"] == 1000


# --------------------------------------------------------------------------- item 2: Pod Security


def test_a_restricted_namespace_admits_every_pod_of_both_examples(cluster: LocalCluster,
                                                                  example_runs: ExampleRuns) -> None:
    """The examples' shared run is in a namespace that enforces the restricted Pod Security Standard."""
    ns = example_runs.namespace
    # The label is enforced: a pod without our settings is refused there.
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": ns},
             "spec": {"containers": [{"name": "c", "image": "grpo-trainer:0.1.0"}]}}
    refused = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(plain), check=False)
    assert refused.returncode != 0 and "restricted" in refused.stderr
    # Succeeded needs every pod: the head and workers (RayCluster Ready), the submitter, the converter.
    assert example_runs.phases[COLOCATED][-1] == example_runs.phases[REFERENCE][-1] == "Succeeded"
    conditions = get(cluster, "grpojob", REFERENCE, "-n", ns)["status"]["conditions"]
    assert [c["status"] for c in conditions if c["type"] == "Exported"] == ["True"], conditions
    refusals = [e["message"] for e in items(cluster, "events", "-n", ns)
                if "violates PodSecurity" in (e.get("message") or "")]
    assert refusals == []


# --------------------------------------------------------------------------- item 3: storage


def test_a_claim_that_cannot_bind_is_named_with_its_reason(cluster: LocalCluster, team_ns: str,
                                                            unserved_class: str) -> None:
    body = example("colocated-length",
                   checkpoints={"volume": {"size": "10Gi", "storageClassName": unserved_class}})
    apply_job(cluster, team_ns, body)

    def unbound() -> dict | None:
        status = get(cluster, "grpojob", COLOCATED, "-n", team_ns).get("status") or {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "ClaimsBound" and c["status"] == "False"]
        return found[0] if found else None

    # The operator's claims timer runs every 2 s here (TEST_TIMERS; 20 s in production): a minute is generous.
    claims_bound = wait_for("a ClaimsBound=False condition", unbound, timeout=60)
    assert claims_bound["reason"] == "ExternalProvisioning"
    assert (f"PersistentVolumeClaim {COLOCATED}-checkpoints (spec.checkpoints.volume) is not bound"
            in claims_bound["message"])
    assert "devcluster.grpo.dev/nobody" in claims_bound["message"]  # the claim's own Event says who should act
    # Held before any GPU: the preflight does not mount a claim made for the job (on zonal storage it would pick the
    # disk's zone), so the job passes it and waits in Pending, its Ray pods unscheduled until the claim binds.
    assert wait_phase(cluster, team_ns, COLOCATED, "Pending", 30)[-1] == "Pending"
    wait_event(cluster, team_ns, COLOCATED, "ClaimNotBound")


def test_each_claim_is_mounted_only_by_the_pods_that_read_it(cluster: LocalCluster, team_ns: str) -> None:
    set_ray_outcome(cluster, team_ns, REFERENCE, "RUNNING", "still training", after_seconds=0)
    apply_job(cluster, team_ns, example("reference-disaggregated"))

    def pods_by_role() -> dict[str, dict] | None:
        pods = items(cluster, "pods", "-n", team_ns, "-l", f"grpo.dev/job={REFERENCE},grpo.dev/role")
        running = {p["metadata"]["labels"]["grpo.dev/role"]: p for p in pods if p["spec"].get("nodeName")}
        return running if {"head", "actor", "rollout", "reward"} <= set(running) else None

    pods = wait_for("head, actor, rollout and reward pods scheduled", pods_by_role, timeout=120)
    claims = {role: {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                     if "persistentVolumeClaim" in v} for role, pod in pods.items()}
    assert claims["head"] == {"models", "datasets", f"{REFERENCE}-checkpoints"}
    assert claims["actor"] == {"models", f"{REFERENCE}-checkpoints"}
    assert claims["rollout"] == claims["reward"] == {"models"}
    # One actor pod and a ReadWriteOnce claim: the head runs on the actor's node.
    assert get(cluster, "pvc", f"{REFERENCE}-checkpoints", "-n", team_ns)["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pods["head"]["spec"]["nodeName"] == pods["actor"]["spec"]["nodeName"]


# --------------------------------------------------------------------------- item 4: checkpoint directories


def _checkpoint_mounts(cluster: LocalCluster, namespace: str, job: str) -> dict[str, tuple[str, str, bool]]:
    """mountPath -> (claim, subPath, readOnly) of the checkpoint mounts of the job's head, as the apiserver has it."""
    rayjob = get(cluster, "rayjob", job, "-n", namespace)
    pod = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["volumes"] if "persistentVolumeClaim" in v}
    return {m["mountPath"]: (claims[m["name"]], m.get("subPath", ""), bool(m.get("readOnly")))
            for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] in ("/checkpoints", "/resume-from")}


def test_two_jobs_on_one_claim_never_see_each_others_steps(cluster: LocalCluster, team_ns: str) -> None:
    cluster.apply(claim_manifest(team_ns, "team-ckpt", "1Ti"))  # a shared team claim (ReadWriteMany)
    for name in ("job-a", "job-b"):
        body = example("reference-disaggregated", checkpoints={"volume": {"claimName": "team-ckpt"}})
        body["metadata"]["name"] = name
        apply_job(cluster, team_ns, body)
    for name in ("job-a", "job-b"):
        wait_phase(cluster, team_ns, name, "Succeeded", timeout=240)
        # Training wrote, and the converter read, only the job's own directory of the shared claim.
        assert _checkpoint_mounts(cluster, team_ns, name) == {"/checkpoints": ("team-ckpt", f"{team_ns}/{name}", False)}
        export = get(cluster, "job", f"{name}-export", "-n", team_ns)["spec"]["template"]["spec"]
        mounts = {m["mountPath"]: m for m in export["containers"][0]["volumeMounts"]}
        assert (mounts["/checkpoints"]["subPath"], mounts["/checkpoints"]["readOnly"]) == (f"{team_ns}/{name}", True)

    # A warm start names the other job; its directory is mounted read-only beside the job's own.
    body = example("colocated-length", checkpoints={"volume": {"claimName": "team-ckpt"},
                                                     "resumeFrom": {"jobName": "job-a", "step": 100}})
    body["metadata"]["name"] = "job-c"
    apply_job(cluster, team_ns, body)
    wait_phase(cluster, team_ns, "job-c", "Running")  # its RayJob (what is checked) exists
    assert _checkpoint_mounts(cluster, team_ns, "job-c") == {
        "/checkpoints": ("team-ckpt", f"{team_ns}/job-c", False),
        "/resume-from": ("team-ckpt", f"{team_ns}/job-a", True),
    }
    verl = yaml.safe_load(get(cluster, "configmap", "job-c-verl", "-n", team_ns)["data"]["verl.yaml"])
    assert verl["grpo"]["checkpoints"] == {"resumeFrom": {"dir": "/resume-from", "step": 100}}


INVALID = [
    ("resumeFrom with both jobName and path",
     {"resumeFrom": {"jobName": "a", "path": "x", "claimName": "team-ckpt"}}, "exactly one of jobName"),
    ("resumeFrom with resume disabled", {"resume": "disable", "resumeFrom": {"jobName": "a", "claimName": "c"}},
     "checkpoints.resumeFrom needs checkpoints.resume=auto"),
    ("ReadWriteOncePod checkpoints", {"volume": {"size": "1Ti", "accessModes": ["ReadWriteOncePod"]}},
     "ReadWriteOncePod lets one pod mount the claim"),
]


@pytest.fixture(scope="module")
def refusal_ns(cluster: LocalCluster, grpo_operator: OperatorProcess) -> Iterator[str]:
    """One namespace for the refusals: each is a server-side dry run, which stores nothing."""
    yield create_namespace(cluster, "checkpoint-refusals")
    cluster.api.delete("namespaces", "checkpoint-refusals")


@pytest.mark.parametrize(("case", "checkpoints", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_checkpoint_settings_that_cannot_work_are_refused_at_apply(
        cluster: LocalCluster, refusal_ns: str, case: str, checkpoints: dict, message: str) -> None:
    body = example("colocated-length", checkpoints=checkpoints)
    with pytest.raises(ApiError) as refused:
        cluster.api.create({**body, "metadata": {**body["metadata"], "namespace": refusal_ns}}, dry_run=True)
    assert refused.value.status == 422, case
    assert message in refused.value.message  # what `kubectl apply` prints


# --------------------------------------------------------------------------- item 6: honest status


def test_the_last_retry_fails_the_job_with_the_ray_error_and_exact_restarts(
        cluster: LocalCluster, team_ns: str) -> None:
    set_attempts(cluster, team_ns, COLOCATED, [
        {"status": "FAILED", "message": "NCCL timeout in actor rank 3", "afterSeconds": 2},
        {"status": "FAILED", "message": "vLLM engine died: CUDA out of memory", "afterSeconds": 2},
    ])
    apply_job(cluster, team_ns, example("colocated-length", scheduling={"retries": 1}))
    seen = wait_phase(cluster, team_ns, COLOCATED, "Failed", timeout=240)
    assert "Running" in seen

    # kubectl wait finds the terminal condition.
    waited = cluster.kubectl("wait", "-n", team_ns, f"grpojob/{COLOCATED}", "--for=condition=Failed",
                             "--timeout=30s", check=False)
    assert waited.returncode == 0, waited.stderr
    job = get(cluster, "grpojob", COLOCATED, "-n", team_ns)
    status = job["status"]
    assert status["restarts"] == 1  # KubeRay's status.failed is 2: it counted the last failure too
    assert get(cluster, "rayjob", COLOCATED, "-n", team_ns)["status"]["failed"] == 2
    ready = condition(job, "Ready")
    assert ready["reason"] == "AppFailed"
    assert ready["message"] == (f"RayJob {COLOCATED} failed after 2 attempts (1 restart): "
                                "vLLM engine died: CUDA out of memory")
    assert "attempt 2 of 2" in condition(job, "Restarted")["message"]
    assert condition(job, "Failed")["status"] == "True"
    assert status["logs"] == {"submitterJob": COLOCATED,
                              "command": f"kubectl logs -n {team_ns} job/{COLOCATED} -c ray-job-submitter"}
    wait_event(cluster, team_ns, COLOCATED, "RayJobRetried", kind=None)
    events = items(cluster, "events", "-n", team_ns, "--field-selector", f"involvedObject.name={COLOCATED}")
    restarts = [e for e in events if e["reason"] == "RayJobRetried"]
    assert len(restarts) == 1 and "attempt 3" not in restarts[0]["message"]
    # The driver's log is where status.logs says, and the failed cluster is kept for reading its pods' logs.
    get(cluster, "job", COLOCATED, "-n", team_ns)
    assert items(cluster, "rayclusters", "-n", team_ns)


def test_success_is_waitable_and_releases_the_cluster_at_once(cluster: LocalCluster,
                                                             example_runs: ExampleRuns) -> None:
    ns = example_runs.namespace
    waited = cluster.kubectl("wait", "-n", ns, f"grpojob/{COLOCATED}", "--for=condition=Complete",
                             "--timeout=150s", check=False, timeout=160)
    assert waited.returncode == 0, waited.stderr
    assert condition(get(cluster, "grpojob", COLOCATED, "-n", ns), "Succeeded")["status"] == "True"
    assert get(cluster, "rayjob", COLOCATED, "-n", ns)["spec"]["ttlSecondsAfterFinished"] == 0
    # Kept 300 s after a failure, but after success the GPUs go back within seconds.
    wait_for("the RayClusters deleted", lambda: not items(cluster, "rayclusters", "-n", ns), timeout=60)
