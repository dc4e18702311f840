"""The issue's GRPOJobs that used to take a RayCluster and 8 GPUs before failing: refused before any GPU.

Against the real control plane. What the spec alone decides, the apiserver refuses at `kubectl apply`
(CEL). What needs the files is the preflight's: its pods are KWOK fakes here (nothing runs the trainer
image yet), so each test runs the real check, grpo_trainer's preflight, on files laid out as the job's
claims would hold them, and hands its verdict to the fake pod through spec.env
(grpo_devcluster.kwok_config.PREFLIGHT_VERDICT_ENV); the pod ends with it as grpo-train would. The
operator's half is all real: the Job, its owner references, the verdict into the Preflight condition,
no RayJob before a pass, the same job running once its spec is fixed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import PREFLIGHT_VERDICT_ENV, SIMULATED_VERDICT, NodePool, node_manifest
from grpo_operator.plan import parse_quantity
from grpo_trainer.preflight import PreflightOptions, preflight_config_file
from grpo_trainer.preflight.verdict import TERMINATION_MESSAGE_LIMIT
from preflight_pod import QWEN2_05B_SHAPE, QWEN2_7B_SHAPE, lay_out, render_spec, save_tiny_chat_tokenizer

from .example_runs import COLOCATED, ExampleRuns
from .grpojobs import apply_job, condition, example, wait_phase
from .kube import get, items, wait_event, wait_for

pytestmark = pytest.mark.e2e

NAME = "qwen2-7b-length"
GIB = 2**30


def real_verdict(tmp_path: Path, body: dict, passing: bool = False, **files: Any) -> str:
    """grpo-train --preflight's verdict on this job's spec, over files as its claims would hold them (the new
    checkpoint claim, not mounted, sized by it when the spec names no size, as the operator's command asks)."""
    tokenizer = save_tiny_chat_tokenizer(tmp_path / "tokenizer")
    pod = lay_out(tmp_path / "pod", tokenizer, **files)
    spec = {k: v for k, v in copy.deepcopy(body["spec"]).items() if k != "env"}
    size = ((spec.get("checkpoints") or {}).get("volume") or {}).get("size")
    options = PreflightOptions(gpu_memory={"actor": 80 * GIB},
                               new_checkpoint_claim_bytes=0 if size is None else int(parse_quantity(size)))
    verdict = preflight_config_file(str(render_spec(pod, spec)), options=options)
    assert verdict.passed == passing, verdict.failures
    return verdict.to_json(TERMINATION_MESSAGE_LIMIT)


def with_verdict(body: dict, verdict: str) -> dict:
    body = copy.deepcopy(body)
    body["spec"]["env"] = [{"name": PREFLIGHT_VERDICT_ENV, "value": verdict}]
    return body


def rayjobs(cluster: LocalCluster, ns: str) -> list[str]:
    return [o["metadata"]["name"] for o in items(cluster, "rayjobs", "-n", ns)]


def patch(cluster: LocalCluster, ns: str, changes: Any, check: bool = True) -> Any:
    return cluster.kubectl("patch", "grpojob", NAME, "-n", ns, "--type=json", "-p", json.dumps(changes),
                           check=check)


def assert_refused_by_preflight(cluster: LocalCluster, ns: str, field: str) -> dict:
    wait_phase(cluster, ns, NAME, "Invalid")
    job = get(cluster, "grpojob", NAME, "-n", ns)
    preflight = condition(job, "Preflight")
    assert (preflight["status"], preflight["reason"]) == ("False", "Failed")
    assert preflight["message"].startswith(f"preflight failed: {field}: "), preflight["message"]
    assert condition(job, "Valid")["reason"] == "PreflightFailed"
    assert job["status"]["preflight"]["passed"] is False
    assert job["status"]["preflight"]["failures"][0]["field"] == field
    wait_event(cluster, ns, NAME, "PreflightFailed")
    assert rayjobs(cluster, ns) == []
    return job


def fix_and_run(cluster: LocalCluster, ns: str, changes: list[dict]) -> None:
    """The same GRPOJob, edited while Invalid (the verdict stand-in removed with the fix), passes and runs."""
    uid = get(cluster, "grpojob", NAME, "-n", ns)["metadata"]["uid"]
    patch(cluster, ns, [*changes, {"op": "remove", "path": "/spec/env"}])
    seen = wait_phase(cluster, ns, NAME, "Running", timeout=150)  # past the preflight: its RayJob runs
    assert "Preflight" in seen or "Pending" in seen, seen
    job = get(cluster, "grpojob", NAME, "-n", ns)
    assert job["metadata"]["uid"] == uid and condition(job, "Preflight")["status"] == "True"
    assert rayjobs(cluster, ns) == [NAME]


def test_a_new_checkpoint_claim_is_sized_for_the_model_after_the_preflight(
        cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    """Issue 30, failure 5: the colocated example's Qwen2-7B checkpoints are about 85 GiB each and it keeps 3; before
    the fix its claim was the default 100Gi, created with the preflight, and the second save would fail. Now the
    claim is created once the preflight passed, sized by it for keep + 1 checkpoints."""
    body = example("colocated-length")
    apply_job(cluster, team_ns, with_verdict(body, real_verdict(tmp_path, body, passing=True, shape=QWEN2_7B_SHAPE)))
    wait_phase(cluster, team_ns, NAME, "Running", timeout=150)
    size = get(cluster, "pvc", f"{NAME}-checkpoints", "-n", team_ns)["spec"]["resources"]["requests"]["storage"]
    assert parse_quantity(size) >= 4 * 85 * GIB, size
    assert get(cluster, "grpojob", NAME, "-n", team_ns)["status"]["preflight"]["checkpointClaimSize"] == size


def test_unknown_spec_verl_key_fails_the_preflight_naming_it_then_the_fixed_job_runs(
        cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    body = example("colocated-length", verl={"actor_rollout_ref.rollout.temprature": 0.9})
    apply_job(cluster, team_ns, with_verdict(body, real_verdict(tmp_path, body)))
    job = assert_refused_by_preflight(cluster, team_ns, "spec.verl.actor_rollout_ref.rollout.temprature")
    assert "did you mean actor_rollout_ref.rollout.temperature" in job["status"]["preflight"]["failures"][0]["message"]
    fix_and_run(cluster, team_ns, [{"op": "remove", "path": "/spec/verl"}])


def test_context_beyond_the_models_positions_fails_naming_max_response_length_then_runs(
        cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    body = example("colocated-length", data={"claimName": "datasets", "trainFiles": ["prompts/train.jsonl"],
                                             "maxPromptLength": 512, "maxResponseLength": 4096})
    apply_job(cluster, team_ns, with_verdict(body, real_verdict(tmp_path, body, max_position_embeddings=4096)))
    job = assert_refused_by_preflight(cluster, team_ns, "spec.data.maxResponseLength")
    assert job["status"]["preflight"]["failures"][0]["value"] == "maxPromptLength 512 + maxResponseLength 4096 = 4608"
    fix_and_run(cluster, team_ns, [{"op": "replace", "path": "/spec/data/maxResponseLength", "value": 2048}])


def test_a_layout_that_cannot_fit_the_gpus_fails_naming_the_micro_batch(
        cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    body = example("colocated-length", algorithm={"microBatchSizePerGPU": 64})
    # A 0.5B model: 64 sequences of 1536 tokens per micro batch make over 200 GiB of logits in the update and in
    # the log-prob forward (the micro batch sizes both); the message leads with the larger and lists every phase.
    apply_job(cluster, team_ns, with_verdict(body, real_verdict(tmp_path, body, shape=QWEN2_05B_SHAPE)))
    job = assert_refused_by_preflight(cluster, team_ns, "spec.algorithm.microBatchSizePerGPU")
    message = job["status"]["preflight"]["failures"][0]["message"]
    assert "actor.log_prob needs about" in message and "actor.update" in message
    # The operator passed the pool's GPU memory (the fake nodes' nvidia.com/gpu.memory label) to the check.
    command = get(cluster, "job", f"{NAME}-preflight", "-n", team_ns)["spec"]["template"]["spec"]["containers"][0]
    at = command["command"].index("--gpu-memory")
    assert command["command"][at:at + 2] == ["--gpu-memory", f"actor={81920 * 2**20}"]


def test_preflight_job_is_an_owned_restricted_cpu_child(cluster: LocalCluster, example_runs: ExampleRuns) -> None:
    """What the colocated example's run left (its preflight Job stays for its log; it goes with the GRPOJob, which
    test_operator's deletion test proves for every child Job)."""
    ns, seen = example_runs.namespace, example_runs.phases[COLOCATED]
    assert seen[0] == "Preflight", seen
    job = get(cluster, "grpojob", NAME, "-n", ns)
    preflight_job = get(cluster, "job", f"{NAME}-preflight", "-n", ns)
    owner = preflight_job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner.get("controller")) == ("GRPOJob", job["metadata"]["uid"], True)
    pod = preflight_job["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # KWOK ran no check; its verdict says so, and the condition shows it.
    assert condition(job, "Preflight")["message"].endswith("1 checks passed")
    assert job["status"]["preflight"]["passed"] is True
    pods = items(cluster, "pods", "-n", ns, "-l", "job-name=" + f"{NAME}-preflight")
    message = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert json.loads(message) == json.loads(SIMULATED_VERDICT)


def test_deleting_a_failed_preflight_job_runs_it_again(cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    body = example("colocated-length", verl={"actor_rollout_ref.rollout.temprature": 0.9})
    apply_job(cluster, team_ns, with_verdict(body, real_verdict(tmp_path, body)))
    assert_refused_by_preflight(cluster, team_ns, "spec.verl.actor_rollout_ref.rollout.temprature")
    first = get(cluster, "job", f"{NAME}-preflight", "-n", team_ns)["metadata"]["uid"]
    cluster.kubectl("delete", "job", f"{NAME}-preflight", "-n", team_ns)

    def rerun() -> bool:
        found = items(cluster, "jobs", "-n", team_ns, "-l", f"grpo.dev/job={NAME}")
        return bool(found) and found[0]["metadata"]["uid"] != first
    wait_for("a new preflight Job", rerun)
    wait_phase(cluster, team_ns, NAME, "Invalid")  # the same files, the same verdict
    assert rayjobs(cluster, team_ns) == []


def test_disabled_preflight_creates_the_rayjob_at_once_and_says_so(cluster: LocalCluster, team_ns: str) -> None:
    apply_job(cluster, team_ns, example("colocated-length", preflight={"enabled": False}))
    seen = wait_phase(cluster, team_ns, NAME, "Running", timeout=150)
    assert "Preflight" not in seen
    job = get(cluster, "grpojob", NAME, "-n", team_ns)
    assert condition(job, "Preflight")["reason"] == "Disabled"
    assert items(cluster, "jobs", "-n", team_ns, "-l", f"grpo.dev/job={NAME}") == []


def test_a_pool_that_cannot_hold_a_role_is_named_and_the_job_starts_once_it_can(
        cluster: LocalCluster, team_ns: str) -> None:
    body = example("colocated-length")
    body["spec"]["placement"]["roles"]["actor"]["nodeSelector"] = {"grpo.dev/pool": "h200"}
    apply_job(cluster, team_ns, body)
    wait_phase(cluster, team_ns, NAME, "Invalid")
    valid = condition(get(cluster, "grpojob", NAME, "-n", team_ns), "Valid")
    assert valid["reason"] == "InsufficientCapacity"
    assert "spec.placement.roles.actor: 1 pod(s) of 8 nvidia.com/gpu" in valid["message"]
    assert "no node matches the pool {grpo.dev/pool=h200}" in valid["message"]
    assert items(cluster, "jobs", "-n", team_ns) == [] and rayjobs(cluster, team_ns) == []
    node = node_manifest(NodePool("h200", 1), 0)
    cluster.apply(node)
    try:
        wait_phase(cluster, team_ns, NAME, "Running", timeout=150)  # started: its RayJob runs
    finally:
        cluster.kubectl("delete", "node", node["metadata"]["name"], "--wait=false", check=False)


def test_with_a_kueue_queue_capacity_is_left_to_kueue(cluster: LocalCluster, team_ns: str) -> None:
    body = example("colocated-length", scheduling={"queueName": "gpu-queue"})
    body["spec"]["placement"]["roles"]["actor"]["nodeSelector"] = {"grpo.dev/pool": "h200"}
    apply_job(cluster, team_ns, body)
    wait_for("the RayJob", lambda: rayjobs(cluster, team_ns) == [NAME])
    labels = get(cluster, "rayjob", NAME, "-n", team_ns)["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu-queue"


def test_the_spec_is_editable_while_invalid_and_frozen_once_training(cluster: LocalCluster, team_ns: str) -> None:
    apply_job(cluster, team_ns, example("colocated-length", model={"claimName": "no-such-models", "path": "m"}))
    wait_phase(cluster, team_ns, NAME, "Invalid")
    patch(cluster, team_ns, [{"op": "replace", "path": "/spec/model/claimName", "value": "models"}])
    wait_phase(cluster, team_ns, NAME, "Running", timeout=150)
    refused = patch(cluster, team_ns, [{"op": "replace", "path": "/spec/data/maxResponseLength", "value": 16}],
                    check=False)
    assert refused.returncode != 0 and "spec.data is immutable once training has started" in refused.stderr
    refused = patch(cluster, team_ns, [{"op": "replace", "path": "/spec/model/path", "value": "other-model"}],
                    check=False)
    assert refused.returncode != 0 and "immutable" in refused.stderr
