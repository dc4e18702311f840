"""A GRPOJob that runs for real on the real node: a rehearsal of a tiny disaggregated layout.

What `hack/demo --real` applies and tests/e2e/real/test_rehearsal.py checks: a tiny Qwen2 model and its
tokenizer (built here by bench/gpu/tiny_model.py, random weights, nothing downloaded) and prompts on claims
of the real node's StorageClass, reward functions in a ConfigMap, and a job of one actor and one rollout
GPU (the node's fake nvidia.com/gpu) whose every pod is pinned to the real node and small enough for it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from . import node_config
from .cluster import LocalCluster
from .errors import DevClusterError
from .node_volumes import STORAGE_CLASS
from .operator_runner import ROOT, claim_manifest

# Pods that must run for real: on the real node, tolerating its taint.
ON_REAL_NODE: dict[str, Any] = {
    "nodeSelector": {node_config.NODE_LABEL: node_config.NODE_LABEL_VALUE},
    "tolerations": [{"key": node_config.NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
}
REWARD_CONFIGMAP = "rehearsal-reward"
GOOD_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return float(len(solution_str.split()))\n"
)
# Fails on every row, as a reward function written for another dataset's fields does.
BROKEN_REWARD = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return extra_info['no-such-key']\n"
)


def node_claim(cluster: LocalCluster, namespace: str, name: str, timeout: float = 60) -> Path:
    """A claim of the real node's StorageClass, bound; returns its directory on this host."""
    body = claim_manifest(namespace, name, size="1Gi")
    body["spec"] |= {"storageClassName": STORAGE_CLASS, "accessModes": ["ReadWriteOnce"]}
    cluster.apply(body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claim = json.loads(cluster.kubectl("get", "pvc", name, "-n", namespace, "-o", "json").stdout)
        volume = claim["spec"].get("volumeName")
        if volume:
            pv = json.loads(cluster.kubectl("get", "pv", volume, "-o", "json").stdout)
            return Path(pv["spec"]["hostPath"]["path"])
        time.sleep(0.5)
    raise DevClusterError("node volumes", f"claim {namespace}/{name} was not bound within {timeout:.0f}s "
                          "(is the real node's volume provisioner running?)")


def prepare_namespace(cluster: LocalCluster, namespace: str) -> None:
    """The namespace with the model, the prompts, an empty checkpoint claim and the reward functions."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    from tiny_model import build_model_dir, write_prompts

    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    build_model_dir(node_claim(cluster, namespace, "models-real") / "tiny")
    write_prompts(node_claim(cluster, namespace, "data-real") / "prompts.jsonl", n=16)
    node_claim(cluster, namespace, "ckpt-real")
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": REWARD_CONFIGMAP, "namespace": namespace},
                   "data": {"good.py": GOOD_REWARD, "broken.py": BROKEN_REWARD}})


def _pinned(resources: dict[str, str]) -> dict[str, Any]:
    return {**ON_REAL_NODE, "resources": resources}


def rehearsal_job(name: str, reward_key: str = "good.py", preflight: bool = True,
                  image: str | None = None) -> dict[str, Any]:
    """A disaggregated job of one actor and one rollout GPU, every pod on the real node."""
    spec: dict[str, Any] = {
        "rehearsal": True,
        "preflight": {"enabled": preflight, "resources": {"cpu": "1", "memory": "3Gi"}},
        "model": {"claimName": "models-real", "path": "tiny"},
        "data": {"claimName": "data-real", "trainFiles": ["prompts.jsonl"], "maxPromptLength": 64,
                 "maxResponseLength": 32, "trainBatchSize": 4},
        "training": {"totalSteps": 2},
        "algorithm": {"groupSize": 2},
        "rollout": {"tensorParallelSize": 1, "gpuMemoryUtilization": 0.5, "temperature": 1.0},
        "reward": {"type": "function",
                   "function": {"configMapName": REWARD_CONFIGMAP, "key": reward_key, "name": "compute_score"}},
        "placement": {
            "mode": "disaggregated",
            "gpusPerNode": 1,
            "head": _pinned({"cpu": "1", "memory": "3Gi"}),
            "roles": {
                "actor": {"gpus": 1, **_pinned({"cpu": "3", "memory": "3Gi"})},
                "rollout": {"gpus": 1, **_pinned({"cpu": "3", "memory": "3Gi"})},
            },
        },
        "checkpoints": {"volume": {"claimName": "ckpt-real"}},
        "export": {"enabled": False},
    }
    if image is not None:
        spec["image"] = image
    return {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPOJob", "metadata": {"name": name}, "spec": spec}
