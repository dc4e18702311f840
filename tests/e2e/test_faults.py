"""The operator under faults, on a control plane of this module's own (its apiserver gets killed).

Short cases for CI; the long version (>= 20 kills of a 200-job burst) is bench/operator/chaos.py.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.kwok_config import NodePool
from grpo_devcluster.operator_runner import OperatorProcess, prepare_job_namespace, running_operator

from .grpojobs import apply_job, condition, example, set_attempts, wait_phase
from .kube import create_namespace, get, items, wait_event, wait_for

pytestmark = pytest.mark.e2e

CHILD_KINDS = ("rayjobs", "configmaps", "serviceaccounts", "roles", "rolebindings", "pvc", "networkpolicies")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir: Path = tmp_path_factory.mktemp("faults")
    local = LocalCluster(workdir, Ports.free(), pools=(NodePool("train", 6),), ray_job_running_seconds=3)
    with local.running_until_exit():
        yield local


@pytest.fixture(scope="module")
def operator(faulty: LocalCluster) -> Iterator[OperatorProcess]:
    with running_operator(faulty) as process:
        yield process


@pytest.fixture
def ns(faulty: LocalCluster, operator: OperatorProcess, request: pytest.FixtureRequest) -> str:
    name = request.node.name.lower().replace("_", "-")[:50].rstrip("-")
    create_namespace(faulty, name)  # waits for the namespace's default ServiceAccount
    return prepare_job_namespace(faulty, name)


def small_job(name: str, **spec_changes: object) -> dict:
    """The colocated example on 4 GPUs, so two jobs share one fake 8-GPU node."""
    body = example("colocated-length", **spec_changes)
    body["metadata"]["name"] = name
    body["spec"]["placement"]["roles"]["actor"]["gpus"] = 4
    return body


def children(cluster: LocalCluster, ns: str) -> dict[str, dict[str, list[str]]]:
    """kind -> job -> names of that kind labelled as the job's, for every job in `ns`."""
    out: dict[str, dict[str, list[str]]] = {}
    for kind in CHILD_KINDS:
        for obj in items(cluster, kind, "-n", ns, "-l", "grpo.dev/job"):
            job = obj["metadata"]["labels"]["grpo.dev/job"]
            out.setdefault(kind, {}).setdefault(job, []).append(obj["metadata"]["name"])
    return out


def assert_one_of_each_child(cluster: LocalCluster, ns: str, jobs: list[str]) -> None:
    found = children(cluster, ns)
    for job in jobs:
        assert found["rayjobs"].get(job) == [job]
        assert found["configmaps"].get(job) == [f"{job}-verl"]
        assert found["serviceaccounts"].get(job) == [f"{job}-trainer"]
        assert found["roles"].get(job) == [f"{job}-trainer"]
        assert found["rolebindings"].get(job) == [f"{job}-trainer"]
        assert found["pvc"].get(job) == [f"{job}-checkpoints"]
        assert found["networkpolicies"].get(job) == [job]
    assert set(found["rayjobs"]) == set(jobs), "a RayJob without its GRPOJob"


def test_operator_killed_repeatedly_during_a_burst_ends_with_one_of_each_child(
        faulty: LocalCluster, operator: OperatorProcess, ns: str) -> None:
    jobs = [f"burst-{i}" for i in range(8)]
    faulty.kubectl("apply", "-n", ns, "-f", "-",
                   input=yaml.safe_dump_all([small_job(j) for j in jobs]))
    rng = random.Random(20261202)
    for _ in range(3):
        time.sleep(rng.uniform(0.2, 3.0))
        operator.kill()
        operator.start()
    for job in jobs:
        seen = wait_phase(faulty, ns, job, "Succeeded", timeout=240)
        assert not {"Failed", "Invalid"} & set(seen), (job, seen)
    assert_one_of_each_child(faulty, ns, jobs)


def test_apiserver_and_etcd_killed_mid_burst_operator_reconnects_and_finishes(
        faulty: LocalCluster, operator: OperatorProcess, ns: str) -> None:
    first = [f"before-{i}" for i in range(5)]
    faulty.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all([small_job(j) for j in first]))
    pid = operator.proc.pid
    time.sleep(1.0)  # mid-burst: some children exist, some not
    faulty.kill_component("kube-apiserver")
    faulty.restart_component("etcd")
    faulty.restart_component("kube-apiserver", kill=False)
    # Jobs created after the restart reach the operator only if its watches came back.
    late = ["after-0", "after-1"]
    wait_for("apiserver serving again",
             lambda: faulty.kubectl("get", "ns", ns, check=False).returncode == 0, timeout=120)
    faulty.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all([small_job(j) for j in late]))
    for job in first + late:
        seen = wait_phase(faulty, ns, job, "Succeeded", timeout=300)
        assert not {"Failed", "Invalid"} & set(seen), (job, seen)
    assert operator.alive() and operator.proc.pid == pid, "the operator had to be restarted"
    assert_one_of_each_child(faulty, ns, first + late)
    warnings = [e for e in items(faulty, "events", "-n", ns) if e["type"] == "Warning"
                and e["involvedObject"]["kind"] == "GRPOJob"]
    assert warnings == [], "transient API errors were surfaced to users"


def test_failed_attempt_is_retried_shown_as_a_restart_and_resumes_from_the_checkpoint(
        faulty: LocalCluster, operator: OperatorProcess, ns: str) -> None:
    name = "retried"
    set_attempts(faulty, ns, name, [
        {"status": "FAILED", "message": "NCCL timeout in actor rank 3", "afterSeconds": 10},
        {"status": "SUCCEEDED", "message": "done", "afterSeconds": 3},
    ])
    apply_job(faulty, ns, small_job(name, scheduling={"retries": 1}))
    wait_phase(faulty, ns, name, "Running", timeout=120)
    # What the trainer patches after it saved a checkpoint (trainer/grpo_trainer status hook).
    faulty.kubectl("patch", "grpojob", name, "-n", ns, "--subresource=status", "--type=merge", "-p",
                   json.dumps({"status": {"checkpoint": {"step": 40, "path": "/checkpoints/global_step_40"}}}))
    seen = wait_phase(faulty, ns, name, "Succeeded", timeout=240)
    assert "Failed" not in seen, seen

    job = get(faulty, "grpojob", name, "-n", ns)
    assert job["status"]["restarts"] == 1
    restarted = condition(job, "Restarted")
    assert restarted["reason"] == "RayJobRetried"
    assert "attempt 2 of 2" in restarted["message"]
    assert "resumes from checkpoint step 40 (/checkpoints/global_step_40)" in restarted["message"]
    wait_event(faulty, ns, name, "RayJobRetried", kind=None)
    # The retry resumes rather than restarts: same checkpoint directory, verl resume_mode=auto,
    # and the RayJob allows one retry.
    verl = yaml.safe_load(get(faulty, "configmap", f"{name}-verl", "-n", ns)["data"]["verl.yaml"])
    assert verl["trainer.resume_mode"] == "auto"
    assert verl["trainer.default_local_dir"] == "/checkpoints"
    rayjob = get(faulty, "rayjob", name, "-n", ns)
    assert rayjob["spec"]["backoffLimit"] == 1
    assert rayjob["status"]["failed"] == 1 and rayjob["status"]["succeeded"] == 1
    volumes = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["volumes"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v}
    assert claims["checkpoints"] == f"{name}-checkpoints"
