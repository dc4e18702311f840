"""The converter as a real pod: a real FSDP checkpoint on the node's volume, exported by the converter Job from
the trainer image into the target volume, verified, and the GRPOJob Succeeded with the export path.

The training itself is simulated (its Ray pods are KWOK's, the dashboard stand-in answers SUCCEEDED): the
checkpoint is written with real torch.distributed FSDP on CPU (tests/unit/export/fsdp_writer.py, through verl's
own checkpoint manager; cached by tests/fsdp_checkpoints.py) and copied into the job's own directory of the
checkpoint claim.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fsdp_checkpoints import WriterSpec, copy_checkpoint
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import prepare_job_namespace
from grpo_devcluster.rehearsal_job import node_claim

from ..grpojobs import apply_job, example, wait_phase
from ..helm import Release
from ..kube import create_namespace, delete_namespace, get
from .conftest import ON_REAL_NODE

pytestmark = pytest.mark.e2e

JOB = "export-real"
# The tests' tiny Qwen2 (tests/unit/export/conftest.py), sharded over 2 FSDP2 ranks on dim 0 and 1.
TINY_QWEN2 = {"vocab_size": 98, "hidden_size": 32, "intermediate_size": 36, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "tie_word_embeddings": True}


def write_fsdp_checkpoint(root: Path, step: int) -> None:
    spec = WriterSpec(out_root="", world_size=2, config=dict(TINY_QWEN2), step=step,
                      shard_dim1=["mlp.down_proj.weight"])
    copy_checkpoint(spec, root)


def test_converter_pod_exports_a_real_checkpoint_and_the_job_succeeds(
        real_node: LocalCluster, operator_pod: Release) -> None:
    namespace = create_namespace(real_node, "export-real")
    try:
        _export_a_real_checkpoint(real_node, namespace)
    finally:
        delete_namespace(real_node, namespace, wait_for_jobs=True)


def _export_a_real_checkpoint(real_node: LocalCluster, namespace: str) -> None:
    prepare_job_namespace(real_node, namespace)  # models/datasets/exports claims for the simulated Ray pods
    checkpoints = node_claim(real_node, namespace, "ckpt-real")
    target = node_claim(real_node, namespace, "exports-real")
    job_dir = checkpoints / namespace / JOB  # every job reads and writes only its own directory (subPath)
    write_fsdp_checkpoint(job_dir, step=3)

    body = example("reference-disaggregated")
    body["metadata"]["name"] = JOB
    body["spec"]["checkpoints"] = {"volume": {"claimName": "ckpt-real"}}
    body["spec"]["export"] = {"enabled": True, "target": {"claimName": "exports-real", "path": "tiny-grpo"},
                              "dtype": "keep", **ON_REAL_NODE, "resources": {"cpu": "1", "memory": "2Gi"}}
    apply_job(real_node, namespace, body)
    wait_phase(real_node, namespace, JOB, "Succeeded", timeout=420)

    status = get(real_node, "grpojob", JOB, "-n", namespace)["status"]
    assert status["export"]["path"] == "tiny-grpo"
    assert status["export"]["step"] == 3
    pod = get(real_node, "pods", "-n", namespace, "-l", f"job-name={JOB}-export")["items"][0]
    assert pod["spec"]["nodeName"] == node_config.NODE_NAME
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    exported = sorted(p.name for p in (target / "tiny-grpo").iterdir())
    assert "config.json" in exported and any(name.endswith(".safetensors") for name in exported), exported
    # the converter reports the weights it wrote: the safetensors shards
    assert status["export"]["sizeBytes"] == sum(p.stat().st_size for p in (target / "tiny-grpo").glob("*.safetensors"))
