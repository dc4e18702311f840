"""Run our operator out-of-cluster against the local control plane (demo and e2e tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import cloud_profile, processes
from .cluster import LocalCluster
from .errors import DevClusterError

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "grpojob.yaml"
RUNTIME_CRD = ROOT / "crds" / "grporuntime.yaml"


def install_crd(cluster: LocalCluster) -> None:
    """The GRPOJob and GRPORuntime CRDs (as the chart installs them)."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD), "-f", str(RUNTIME_CRD))
    cluster.wait_established("grpojobs.grpo.dev", "grporuntimes.grpo.dev")


EXAMPLE_CLAIMS = ("models", "datasets", "exports")


def claim_manifest(namespace: str, name: str, size: str = "1Ti", storage_class: str | None = None) -> dict:
    """A ReadWriteMany PVC of `storage_class`, else of the cluster's default StorageClass (KWOK-provisioned)."""
    spec: dict = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def prepare_job_namespace(cluster: LocalCluster, namespace: str, claims: tuple[str, ...] = EXAMPLE_CLAIMS) -> str:
    """A namespace holding the claims the examples mount (model and data), ready for GRPOJobs. On the cloud profile
    they are of its shared file class, as a user puts models on Filestore or EFS: its default class is zonal
    ReadWriteOnce disks, which many pods on many nodes cannot mount."""
    storage_class = cloud_profile.SHARED_CLASS if cluster.cloud else None
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.apply([claim_manifest(namespace, claim, storage_class=storage_class) for claim in claims])
    return namespace


class OperatorProcess:
    """`python -m grpo_operator --standalone` with the cluster's kubeconfig; metrics on loopback."""

    def __init__(self, cluster: LocalCluster, log_dir: Path, extra_env: dict[str, str] | None = None,
                 python: str = sys.executable, args: tuple[str, ...] = ("--standalone",),
                 log_name: str = "grpo-operator.log") -> None:
        self.cluster = cluster
        self.python = python  # another interpreter runs the operator with that one's packages (bench --as-image)
        self.args = args  # how it runs beside others: alone, or electing a leader (--leader-elect LEASE)
        self.log = log_dir / log_name
        # One call: two separate ones may both get the port the kernel just handed out (and the operator's second
        # server then fails with "Address already in use").
        self.metrics_port, self.liveness_port = processes.free_ports(2)
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def health_url(self) -> str:
        """Its /healthz and /readyz (grpo_operator/health.py) are under this."""
        return f"http://127.0.0.1:{self.liveness_port}"

    def start(self, until: str = "/readyz") -> OperatorProcess:
        """Start it and wait for `until` to answer 200: /readyz (it reconciles, or follows ready to take over) or
        /healthz (it runs, fit or not)."""
        env = {**os.environ, **self.cluster.env(), "GRPO_OPERATOR_METRICS_HOST": "127.0.0.1",
               "GRPO_OPERATOR_METRICS_PORT": str(self.metrics_port), "PYTHONUNBUFFERED": "1", **self.extra_env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", "grpo_operator", *self.args,
                 f"--liveness=http://127.0.0.1:{self.liveness_port}"],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started = processes.Started("grpo-operator", self.proc.pid, self.log)
        # Ready: kopf runs (its watchers started) and the start-up checks passed (grpo_operator/health.py).
        processes.wait_until("grpo-operator", lambda: processes.http_ok(
            f"http://127.0.0.1:{self.liveness_port}{until}"), started, 60)
        return self

    def kill(self) -> None:
        """SIGKILL, as a crashed pod would die: no cleanup, no goodbye."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_alive(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.alive():
                raise DevClusterError("grpo-operator", f"exited; see {self.log}:\n{processes.log_tail(self.log)}")
            time.sleep(0.5)


# The operator's timers as the e2e tests run them (GRPO_OPERATOR_* settings): a job waiting for a claim, a
# ConfigMap or a KubeRay upgrade is looked at again within seconds, not the production half-minute. The
# defaults themselves keep their unit tests (tests/unit/operator/test_settings.py).
TEST_TIMERS = {
    "GRPO_OPERATOR_DEPENDENCY_RETRY_SECONDS": "2",
    "GRPO_OPERATOR_STORAGE_CHECK_SECONDS": "2",
    "GRPO_OPERATOR_CLAIM_PROVISIONING_GRACE_SECONDS": "2",
    "GRPO_OPERATOR_ERROR_RETRY_SECONDS": "2",
}


@contextmanager
def running_operator(cluster: LocalCluster, extra_env: dict[str, str] | None = None) -> Iterator[OperatorProcess]:
    """Our CRD installed and the operator running against `cluster` (logs in its log dir); stopped on exit."""
    install_crd(cluster)
    operator = OperatorProcess(cluster, cluster.log_dir, extra_env=extra_env).start()
    try:
        yield operator
    finally:
        operator.stop()
