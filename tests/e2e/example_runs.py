"""Both examples run once per session, as the README has a user run them, for every test that reads what a run
leaves: phases, status and conditions, children, placement, printer columns, metrics, events.

The namespace enforces the "restricted" Pod Security Standard, as a managed cluster's team namespace may; the
jobs are the examples unchanged. What a test needs to see while the run is under way (the reference job's pods,
which go when the job succeeds) is recorded on the way.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import prepare_job_namespace

from .grpojobs import apply_job, example, wait_phase
from .kube import create_namespace, items, wait_for

NAMESPACE = "examples"
COLOCATED = "qwen2-7b-length"  # examples/colocated-length.yaml
REFERENCE = "qwen2-7b-reference"  # examples/reference-disaggregated.yaml
ROLES = ("actor", "rollout", "reward")


@dataclass(frozen=True)
class ExampleRuns:
    namespace: str
    phases: dict[str, list[str]]  # job -> every phase it passed through, in order (watched)
    role_pods: dict[str, dict]  # the reference job's pods by role (and its head), when all were running
    colocated_pods: dict[str, dict]  # the colocated job's actor and head, when both were running


def _running_role_pods(cluster: LocalCluster, namespace: str, job: str = REFERENCE,
                       roles: tuple[str, ...] = (*ROLES, "head")) -> dict[str, dict] | None:
    pods = items(cluster, "pods", "-n", namespace, "-l", f"grpo.dev/job={job}")
    running = {p["metadata"]["labels"].get("grpo.dev/role"): p for p in pods
               if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")
               and "grpo.dev/role" in p["metadata"]["labels"]}
    return running if set(roles) <= set(running) else None


def run_examples(cluster: LocalCluster, namespace: str = NAMESPACE) -> ExampleRuns:
    create_namespace(cluster, namespace)
    cluster.api.patch("namespaces", namespace, None, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    prepare_job_namespace(cluster, namespace)
    with ThreadPoolExecutor(4) as pool:
        # Watches first, then the jobs: every phase from the first is seen.
        colocated = pool.submit(wait_phase, cluster, namespace, COLOCATED, "Succeeded", 240)
        reference = pool.submit(wait_phase, cluster, namespace, REFERENCE, "Succeeded", 300)
        apply_job(cluster, namespace, example("colocated-length"))
        apply_job(cluster, namespace, example("reference-disaggregated"))
        pods = pool.submit(wait_for, "the reference job's actor, rollout and reward pods running",
                           lambda: _running_role_pods(cluster, namespace), 240)
        colocated_pods = pool.submit(wait_for, "the colocated job's actor and head running",
                                     lambda: _running_role_pods(cluster, namespace, COLOCATED, ("actor", "head")), 240)
        return ExampleRuns(namespace, {COLOCATED: colocated.result(), REFERENCE: reference.result()}, pods.result(),
                           colocated_pods.result())
