"""Helm against a local cluster: install the chart, read what the release is."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grpo_devcluster.cluster import LocalCluster

from .kube import create_namespace

CHART = Path(__file__).resolve().parents[2] / "charts" / "grpo-operator"


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    fullname: str
    notes: str

    @property
    def service_account(self) -> str:
        return self.fullname

    @property
    def subject(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def helm(cluster: LocalCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    # HOME inside the cluster's folder: helm keeps its cache there, not in the checkout or the user's home.
    env = {**cluster.env(), "HOME": str(cluster.workdir / "helm-home")}
    result = subprocess.run([str(cluster.helm_path), *args], env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def install(cluster: LocalCluster, name: str, namespace: str, *values: str, timeout: str = "120s") -> Release:
    """helm install into a namespace that enforces the "restricted" Pod Security Standard, and wait
    until the Deployment is available: the apiserver admitted the pod as restricted."""
    create_namespace(cluster, namespace)
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    set_args = [arg for value in values for arg in ("--set", value)]
    out = helm(cluster, "install", name, str(CHART), "-n", namespace, "--wait", "--timeout", timeout, *set_args)
    return Release(name, namespace, f"{name}-grpo-operator", out.stdout.split("NOTES:", 1)[-1])


def selftest(metrics_url: str) -> subprocess.CompletedProcess:
    """`helm test`'s command (templates/tests/install-check.yaml), against an operator on loopback."""
    return subprocess.run([sys.executable, "-m", "grpo_operator.selftest", f"--metrics-url={metrics_url}",
                           "--version=0.1.0", "--wait=10"], capture_output=True, text=True, timeout=60, check=False)
