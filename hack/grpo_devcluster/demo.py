"""The README's demo: the example GRPOJobs run end to end on the local simulated cluster.

Starts the control plane (building it on first use), installs our CRD (KubeRay's comes with the
cluster), starts the operator, applies every manifest in examples/, waits for the jobs to finish and
prints `kubectl get grpojobs`. Pods are simulated by KWOK: nothing trains here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from .cluster import LocalCluster, Ports
from .errors import DevClusterError
from .operator_runner import ROOT, OperatorProcess, install_crd, prepare_job_namespace

NAMESPACE = "demo"
TERMINAL = {"Succeeded", "Failed", "Invalid"}


def _phases(cluster: LocalCluster) -> dict[str, str]:
    jobs = json.loads(cluster.kubectl("get", "grpojobs", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return {j["metadata"]["name"]: (j.get("status") or {}).get("phase", "") for j in jobs}


def run(keep: bool, timeout: float) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="grpo-demo-"))
    cluster = LocalCluster(workdir, Ports.free(), ray_job_running_seconds=10)
    operator: OperatorProcess | None = None
    print("== starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, "
          "KWOK, KubeRay)", flush=True)
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
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            phases = _phases(cluster)
            summary = ", ".join(f"{k}={v or '-'}" for k, v in sorted(phases.items()))
            if summary != last:
                print(f"   {summary}", flush=True)
                last = summary
            if phases and all(p in TERMINAL for p in phases.values()):
                break
            time.sleep(1)
        print("== kubectl get grpojobs; kubectl get rayjobs,jobs,pvc (namespace demo)", flush=True)
        print(cluster.kubectl("get", "grpojobs", "-n", NAMESPACE).stdout)
        print(cluster.kubectl("get", "rayjobs,jobs,pvc", "-n", NAMESPACE).stdout)
        print("Note: pods are simulated by KWOK on fake 8-GPU nodes; the scheduling, KubeRay, garbage collection\n"
              "and the operator are real, but no training happens in this demo (see README: GPU runs).")
        ok = all(p == "Succeeded" for p in _phases(cluster).values())
        if keep:
            print(f"\nCluster left running: export KUBECONFIG={cluster.kubeconfig}; "
                  f"stop with: grpo-devcluster stop --dir {workdir}")
        return 0 if ok else 1
    finally:
        if not keep:
            if operator:
                operator.stop()
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the operator running")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    try:
        return run(args.keep, args.timeout)
    except DevClusterError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
