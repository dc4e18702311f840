"""Issue 33.2 against the real control plane: the preflight sizes the knobs the user left empty for the model and
the GPUs, and the RayJob's verl ConfigMap carries those values, with a Sized Event saying what and why.

The preflight pod is a KWOK fake (tests/e2e/test_preflight.py says how): the test runs the real preflight,
grpo_trainer's, on files laid out as the job's claims would hold them, and hands its verdict to the pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_trainer.preflight.verdict import Verdict
from preflight_pod import QWEN2_05B_SHAPE

from .grpojobs import apply_job, example, wait_phase
from .kube import get, wait_event
from .test_preflight import NAME, real_verdict, with_verdict

pytestmark = pytest.mark.e2e


def test_the_rayjobs_config_carries_what_the_preflight_sized(
        cluster: LocalCluster, team_ns: str, tmp_path: Path) -> None:
    body = example("colocated-length")  # no micro batch, vLLM memory or prefill chunk set: all left to the sizing
    verdict = real_verdict(tmp_path, body, passing=True, shape=QWEN2_05B_SHAPE)
    sized = dict(Verdict.from_dict(yaml.safe_load(verdict)).sized)
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in sized
    assert "actor_rollout_ref.rollout.max_num_seqs" in sized
    apply_job(cluster, team_ns, with_verdict(body, verdict))
    wait_phase(cluster, team_ns, NAME, "Running", timeout=150)
    text = get(cluster, "configmap", f"{NAME}-verl", "-n", team_ns)["data"]["verl.yaml"]
    rendered = yaml.safe_load(text)
    assert {k: rendered[k] for k in sized} == sized
    assert "# Sized by the preflight: sized for 80 GiB GPUs" in text
    assert "sized for 80 GiB GPUs" in wait_event(cluster, team_ns, NAME, "Sized", kind="Normal")["message"]
