"""The README's demo: the example GRPOJobs run end to end on the local simulated cluster.

Starts the control plane (building it on first use), installs our CRD (KubeRay's comes with the
cluster), starts the operator, applies every manifest in examples/, waits for the jobs to finish and
prints `kubectl get grpojobs`. Pods are simulated by KWOK: nothing trains here.

`--cloud`: the same on the cloud-like profile (cloud_profile.py): zones, GPU Feature Discovery labels, tainted GPU
nodes, zonal WaitForFirstConsumer disks, one static H100 node and a Karpenter pool that starts at zero. The examples
are applied unchanged; one of them runs on the static node, the other on a node Karpenter adds for it, and each
checkpoint claim ends in its actor's zone. The demo says where each actor ran and where its claim lives.

`--real` (root, Linux): the real node beside the KWOK nodes and the trainer image built from its
Dockerfile; a rehearsal GRPOJob (rehearsal_job.py) whose Ray cluster really forms on the real node and
whose driver really runs `grpo-train --rehearsal` in the image. No GPU: nothing trains there either.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from . import cloud_profile
from .cluster import LocalCluster, Ports
from .errors import DevClusterError
from .operator_runner import ROOT, OperatorProcess, install_crd, prepare_job_namespace
from .rehearsal_job import prepare_namespace, rehearsal_job

NAMESPACE = "demo"
TERMINAL = {"Succeeded", "Failed", "Invalid"}


REAL_NAMESPACE = "demo-real"
REAL_JOB = "tiny-rehearsal"


def _phases(cluster: LocalCluster, namespace: str = NAMESPACE) -> dict[str, str]:
    jobs = json.loads(cluster.kubectl("get", "grpojobs", "-n", namespace, "-o", "json").stdout)["items"]
    return {j["metadata"]["name"]: (j.get("status") or {}).get("phase", "") for j in jobs}


def _actor_nodes(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    """job -> the node its actor pod runs on, for the actors that are placed."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", "grpo.dev/role=actor",
                                      "-o", "json").stdout)["items"]
    return {p["metadata"]["labels"]["grpo.dev/job"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def _wait_terminal(cluster: LocalCluster, namespace: str, timeout: float,
                   actors: dict[str, str] | None = None) -> None:
    """Until every job ends; `actors` collects where each job's actor ran (its pods go when it succeeds)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if actors is not None:
            actors.update(_actor_nodes(cluster, namespace))
        phases = _phases(cluster, namespace)
        summary = ", ".join(f"{k}={v or '-'}" for k, v in sorted(phases.items()))
        if summary != last:
            print(f"   {summary}", flush=True)
            last = summary
        if phases and all(p in TERMINAL for p in phases.values()):
            return
        time.sleep(1)


def _where_they_ran(cluster: LocalCluster, actors: dict[str, str]) -> bool:
    """Print each job's actor node, its pool and zone, and its checkpoint claim's zone; whether one actor ran on a
    node an autoscaler added and every claim is in its actor's zone."""
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
             for n in json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    print("== where each actor ran, and where its checkpoint claim lives", flush=True)
    scaled, zonal = False, True
    for job, node in sorted(actors.items()):
        labels = nodes.get(node, {})
        karpenter_pool = labels.get("karpenter.sh/nodepool")
        scaled = scaled or karpenter_pool is not None
        claim = json.loads(cluster.kubectl("get", "pvc", f"{job}-checkpoints", "-n", NAMESPACE, "-o", "json").stdout)
        volume = json.loads(cluster.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json").stdout)
        claim_zone = volume["metadata"].get("labels", {}).get(cloud_profile.ZONE_LABEL, "?")
        zonal = zonal and claim_zone == labels.get(cloud_profile.ZONE_LABEL)
        pool = f"Karpenter NodePool {karpenter_pool} (added for this job)" if karpenter_pool else \
            f"{cloud_profile.NODE_POOL_LABEL}={labels.get(cloud_profile.NODE_POOL_LABEL)} (static)"
        print(f"   {job}: actor on {node}, {pool}, zone {labels.get(cloud_profile.ZONE_LABEL)}; "
              f"checkpoint claim in zone {claim_zone}", flush=True)
    return scaled and zonal


def run(keep: bool, timeout: float, cloud: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="grpo-demo-"))
    cluster = LocalCluster(workdir, Ports.free(), ray_job_running_seconds=10, cloud=cloud)
    operator: OperatorProcess | None = None
    print("== starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, "
          "KWOK, KubeRay" + (", Karpenter, Kueue; the cloud-like profile" if cloud else "") + ")", flush=True)
    cluster.start()
    try:
        install_crd(cluster)
        operator = OperatorProcess(cluster, cluster.log_dir).start()
        print(f"== operator running (log: {operator.log})", flush=True)
        prepare_job_namespace(cluster, NAMESPACE)
        examples = sorted((ROOT / "examples").glob("*.yaml"))
        for example in examples:
            print(f"== kubectl apply -n {NAMESPACE} -f {example.relative_to(ROOT)}", flush=True)
            print(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(example)).stdout.strip(), flush=True)
        actors: dict[str, str] = {}
        _wait_terminal(cluster, NAMESPACE, timeout, actors)
        print("== kubectl get grpojobs; kubectl get rayjobs,jobs,pvc (namespace demo)", flush=True)
        print(cluster.kubectl("get", "grpojobs", "-n", NAMESPACE).stdout)
        print(cluster.kubectl("get", "rayjobs,jobs,pvc", "-n", NAMESPACE).stdout)
        ok = all(p == "Succeeded" for p in _phases(cluster).values())
        if cloud:
            ok = _where_they_ran(cluster, actors) and ok
        print("Note: pods are simulated by KWOK on fake 8-GPU nodes; the scheduling, KubeRay, garbage collection\n"
              "and the operator are real, but no training happens in this demo (see README: GPU runs).")
        if keep:
            print(f"\nCluster left running: export KUBECONFIG={cluster.kubeconfig}; "
                  f"stop with: grpo-devcluster stop --dir {workdir}")
        return 0 if ok else 1
    finally:
        if not keep:
            if operator:
                operator.stop()
            cluster.stop()


def run_real(keep: bool, timeout: float) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="grpo-demo-real-"))
    cluster = LocalCluster(workdir, Ports.free(), real_node=True)
    operator: OperatorProcess | None = None
    print("== starting the local control plane and the real node (containerd, kubelet, CoreDNS)", flush=True)
    cluster.start()
    try:
        install_crd(cluster)
        print("== building the trainer image from images/trainer/Dockerfile (cached) into the node", flush=True)
        trainer = cluster.load_node_images(("trainer",))["trainer"]
        operator = OperatorProcess(cluster, cluster.log_dir).start()
        print(f"== operator running (log: {operator.log}); model, prompts and reward on the node's volumes",
              flush=True)
        prepare_namespace(cluster, REAL_NAMESPACE)
        print(f"== kubectl apply -n {REAL_NAMESPACE}: GRPOJob {REAL_JOB} (spec.rehearsal: true, {trainer})",
              flush=True)
        cluster.apply({**rehearsal_job(REAL_JOB, image=trainer), "metadata": {"name": REAL_JOB,
                                                                              "namespace": REAL_NAMESPACE}})
        _wait_terminal(cluster, REAL_NAMESPACE, timeout)
        print(cluster.kubectl("get", "grpojobs", "-n", REAL_NAMESPACE).stdout)
        print(cluster.kubectl("get", "pods", "-n", REAL_NAMESPACE, "-o", "wide").stdout)
        job = json.loads(cluster.kubectl("get", "grpojob", REAL_JOB, "-n", REAL_NAMESPACE, "-o", "json").stdout)
        rehearsal = (job.get("status") or {}).get("rehearsal") or {}
        print("== status.rehearsal (what grpo-train --rehearsal checked in the Ray cluster)")
        for check in rehearsal.get("checks") or []:
            print(f"   {'ok  ' if check['ok'] else 'FAIL'} {check['name']}: {check['message']}")
        print("Note: the Ray cluster, the driver and every check ran for real on this machine's CPUs; the node's\n"
              "8 nvidia.com/gpu are an extended resource without devices, so no GPU work runs (README).")
        if keep:
            print(f"\nCluster left running: export KUBECONFIG={cluster.kubeconfig}; "
                  f"stop with: grpo-devcluster stop --dir {workdir}")
        return 0 if _phases(cluster, REAL_NAMESPACE).get(REAL_JOB) == "Succeeded" else 1
    finally:
        if not keep:
            if operator:
                operator.stop()
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the operator running")
    parser.add_argument("--cloud", action="store_true",
                        help="on the cloud-like profile: zones, tainted GPU nodes, zonal disks, Karpenter, Kueue")
    parser.add_argument("--real", action="store_true",
                        help="a rehearsal GRPOJob whose Ray cluster really forms on the real node (root)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait for the jobs (300; --real 900)")
    args = parser.parse_args(argv)
    try:
        if args.real:
            return run_real(args.keep, args.timeout or 900)
        return run(args.keep, args.timeout or 300, cloud=args.cloud)
    except DevClusterError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
