"""GRPOJob manifests and readers shared by the operator e2e tests."""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from grpo_devcluster.cluster import LocalCluster

from .kube import WaitTimeout, get, wait_object

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, **spec_changes: Any) -> dict:
    body = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    body = copy.deepcopy(body)
    body["spec"].update(spec_changes)
    return body


def apply_job(cluster: LocalCluster, namespace: str, body: dict) -> None:
    """Server-side apply, as `kubectl apply --server-side` would (the CRD's CEL rules judge it the same)."""
    cluster.api.apply(copy.deepcopy(body), namespace=namespace)


def phase(cluster: LocalCluster, namespace: str, name: str) -> str | None:
    return (get(cluster, "grpojob", name, "-n", namespace).get("status") or {}).get("phase")


def wait_phase(cluster: LocalCluster, namespace: str, name: str, wanted: str, timeout: float = 120) -> list[str]:
    """Wait for `wanted`; return the distinct phases the job passed through on the way, in order (from a watch,
    so a phase held for a moment is seen too)."""
    seen: list[str] = []

    def check(job: dict | None) -> bool:
        current = ((job or {}).get("status") or {}).get("phase")
        if current and (not seen or seen[-1] != current):
            seen.append(current)
        return current == wanted

    try:
        wait_object(cluster, "grpojobs", name, namespace, check, timeout, f"GRPOJob {namespace}/{name} phase {wanted}")
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}; phases seen {seen}") from None
    return seen


def set_ray_outcome(cluster: LocalCluster, namespace: str, rayjob: str, status: str, message: str,
                    after_seconds: float = 2) -> None:
    body = json.dumps({"status": status, "message": message, "afterSeconds": after_seconds}).encode()
    request = urllib.request.Request(f"{cluster.dashboard_standin_url}/-/outcomes/{namespace}/{rayjob}",
                                     data=body, method="PUT")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5) as response:
        assert response.status == 200


def set_attempts(cluster: LocalCluster, ns: str, rayjob: str, attempts: list[dict]) -> None:
    """The Ray job of each KubeRay attempt reports these outcomes in turn."""
    body = json.dumps({"attempts": attempts}).encode()
    request = urllib.request.Request(f"{cluster.dashboard_standin_url}/-/outcomes/{ns}/{rayjob}",
                                     data=body, method="PUT")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5) as response:
        assert response.status == 200


def condition(job: dict, kind: str) -> dict:
    return next(c for c in job["status"]["conditions"] if c["type"] == kind)
