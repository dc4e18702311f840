"""Chaos: SIGKILL the operator at random moments during a burst of GRPOJobs, and restart it.

  .venv/bin/python bench/operator/chaos.py --jobs 200 --kills 20 [--apiserver-restarts 2] [--seed 7]

Every job's Ray job is given an outcome up front (most succeed, every `--fail-every`-th fails), so
the right final phase of each is known. The operator is killed `--kills` times at random moments
while the burst is being handled (optionally the apiserver and etcd are killed and restarted too),
then left alone until every job is terminal. Checked afterwards, per GRPOJob: exactly one of each
child (RayJob, ConfigMap, ServiceAccount, Role, RoleBinding, checkpoint PVC), no child without its
GRPOJob, and the phase the outcome implies. Prints a summary; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.kwok_config import NodePool
from grpo_devcluster.operator_runner import OperatorProcess, install_crd
from kubernetes import client

import bench

NAMESPACE = "chaos"
EXPECTED_CHILDREN = {  # kind plural -> name of the child of job `j`
    "rayjobs": "{j}",
    "configmaps": "{j}-verl",
    "serviceaccounts": "{j}-trainer",
    "roles": "{j}-trainer",
    "rolebindings": "{j}-trainer",
    "persistentvolumeclaims": "{j}-checkpoints",
}


def expected_phase(index: int, fail_every: int) -> str:
    return "Failed" if fail_every and index % fail_every == fail_every - 1 else "Succeeded"


def set_outcome(cluster: LocalCluster, rayjob: str, status: str, after_seconds: float) -> None:
    body = json.dumps({"status": status, "message": f"chaos says {status}", "afterSeconds": after_seconds}).encode()
    request = urllib.request.Request(f"{cluster.dashboard_standin_url}/-/outcomes/{NAMESPACE}/{rayjob}",
                                     data=body, method="PUT")
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5).read()


def list_children(api: client.ApiClient) -> dict[str, dict[str, list[str]]]:
    """plural -> job -> names labelled as that job's."""
    core, rbac, custom = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.CustomObjectsApi(api)
    selector = "grpo.dev/job"
    listed = {
        "rayjobs": [(o["metadata"]["labels"], o["metadata"]["name"]) for o in custom.list_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayjobs", label_selector=selector)["items"]],
        "configmaps": core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items,
        "serviceaccounts": core.list_namespaced_service_account(NAMESPACE, label_selector=selector).items,
        "roles": rbac.list_namespaced_role(NAMESPACE, label_selector=selector).items,
        "rolebindings": rbac.list_namespaced_role_binding(NAMESPACE, label_selector=selector).items,
        "persistentvolumeclaims": core.list_namespaced_persistent_volume_claim(
            NAMESPACE, label_selector=selector).items,
    }
    out: dict[str, dict[str, list[str]]] = {}
    for plural, objects in listed.items():
        for obj in objects:
            labels, name = obj if isinstance(obj, tuple) else (obj.metadata.labels, obj.metadata.name)
            out.setdefault(plural, {}).setdefault(labels["grpo.dev/job"], []).append(name)
    return out


def violations(jobs: list[str], phases: dict[str, str | None], children: dict[str, dict[str, list[str]]],
               wanted: dict[str, str]) -> list[str]:
    """Every way the end state differs from one child of each kind per job and the expected phase."""
    found = []
    for job in jobs:
        for plural, pattern in EXPECTED_CHILDREN.items():
            names = children.get(plural, {}).get(job, [])
            if names != [pattern.format(j=job)]:
                found.append(f"{job}: {plural} {names}")
        if phases.get(job) != wanted[job]:
            found.append(f"{job}: phase {phases.get(job)} (want {wanted[job]})")
    for plural, by_job in children.items():
        for orphan in set(by_job) - set(jobs):
            found.append(f"orphan {plural} of {orphan}: {by_job[orphan]}")
    return found


def phases_now(api: client.ApiClient) -> dict[str, str | None]:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "grpo.dev", "v1alpha1", NAMESPACE, "grpojobs")["items"]
    return {i["metadata"]["name"]: (i.get("status") or {}).get("phase") for i in items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--apiserver-restarts", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=100, help="8-GPU nodes; jobs take 4 GPUs each")
    parser.add_argument("--fail-every", type=int, default=10, help="every n-th job's Ray job fails")
    parser.add_argument("--ray-seconds", type=float, default=30, help="how long each Ray job runs")
    parser.add_argument("--max-gap", type=float, default=6.0, help="longest pause between two kills")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "grpo-chaos")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    cluster = LocalCluster(args.workdir / "cluster", Ports.free(), pools=(NodePool("train", args.nodes),),
                           ray_job_running_seconds=args.ray_seconds)
    cluster.start()
    operator: OperatorProcess | None = None
    try:
        bench.configure_client(cluster)
        api = bench.API
        install_crd(cluster)
        bench.prepare_namespace(cluster, NAMESPACE)
        jobs = [f"chaos-{i:03d}" for i in range(args.jobs)]
        wanted = {j: expected_phase(i, args.fail_every) for i, j in enumerate(jobs)}
        for job, phase in wanted.items():
            set_outcome(cluster, job, "FAILED" if phase == "Failed" else "SUCCEEDED", args.ray_seconds)
        operator = OperatorProcess(cluster, args.workdir / "logs").start()
        started = time.monotonic()
        bench.create_all(NAMESPACE, [bench.job_manifest(j, 4) for j in jobs])
        restart_at = set(rng.sample(range(args.kills), min(args.apiserver_restarts, args.kills)))
        for kill in range(args.kills):
            time.sleep(rng.uniform(0.2, args.max_gap))
            operator.kill()
            if kill in restart_at:
                cluster.kill_component("kube-apiserver")
                cluster.restart_component("etcd")
                cluster.restart_component("kube-apiserver", kill=False)
            operator.start()
            done = Counter(phases_now(api).values())
            print(f"  kill {kill + 1:2d} at {time.monotonic() - started:6.1f}s"
                  f"{' +apiserver/etcd restart' if kill in restart_at else ''}: phases {dict(done)}", flush=True)
        chaos_end = time.monotonic() - started
        while time.monotonic() - started < args.timeout:
            phases = phases_now(api)
            if all(phases.get(j) in ("Succeeded", "Failed") for j in jobs):
                break
            time.sleep(2)
        converged = time.monotonic() - started
        phases = phases_now(api)
        found = violations(jobs, phases, list_children(api), wanted)
        print(f"jobs {args.jobs}, operator kills {args.kills}, apiserver+etcd restarts {len(restart_at)}, "
              f"seed {args.seed}: chaos over at {chaos_end:.0f}s, all terminal at {converged:.0f}s; "
              f"phases {dict(Counter(phases.values()))}; wanted {dict(Counter(wanted.values()))}")
        print(f"violations: {len(found)}")
        for line in found[:40]:
            print("  " + line)
        return 1 if found else 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
