"""Small helpers the e2e tests share: read objects through kubectl and wait for conditions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from grpo_devcluster.cluster import LocalCluster


def get(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def items(cluster: LocalCluster, *args: str) -> list[dict]:
    return get(cluster, *args)["items"]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90, interval: float = 0.5) -> Any:
    """Return check()'s first truthy value; fail with `what` and the last value seen after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def create_namespace(cluster: LocalCluster, name: str) -> str:
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(f"default ServiceAccount in {name}",
             lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0)
    return name
