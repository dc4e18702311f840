"""GRPOJob manifests and readers shared by the operator e2e tests."""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from grpo_devcluster.cluster import LocalCluster

from .kube import get, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, **spec_changes: Any) -> dict:
    body = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    body = copy.deepcopy(body)
    body["spec"].update(spec_changes)
    return body


def apply_job(cluster: LocalCluster, namespace: str, body: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))


def phase(cluster: LocalCluster, namespace: str, name: str) -> str | None:
    return (get(cluster, "grpojob", name, "-n", namespace).get("status") or {}).get("phase")


def wait_phase(cluster: LocalCluster, namespace: str, name: str, wanted: str, timeout: float = 120) -> list[str]:
    """Wait for `wanted`; return the distinct phases seen on the way, in order."""
    seen: list[str] = []

    def check() -> bool:
        current = phase(cluster, namespace, name)
        if current and (not seen or seen[-1] != current):
            seen.append(current)
        return current == wanted

    try:
        wait_for(f"GRPOJob {namespace}/{name} phase {wanted}", check, timeout, interval=0.2)
    except AssertionError as exc:
        status = get(cluster, "grpojob", name, "-n", namespace).get("status")
        raise AssertionError(f"{exc}; phases seen {seen}; status now {status}") from None
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
