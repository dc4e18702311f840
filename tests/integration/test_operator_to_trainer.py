"""The verl.yaml the operator renders for each example is accepted by grpo-train as is (dry run).

The operator and the trainer meet only through this file (docs/config-contract.md), so this is the
test that fails when either side changes its half of the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from grpo_operator.api import GRPOJob
from grpo_operator.plan import plan
from grpo_operator.render import render_verl_config
from grpo_trainer.cli import main, parse_dry_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _rendered(example: str, model_root: Path) -> tuple[GRPOJob, str]:
    job = GRPOJob.model_validate(yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text()))
    job_plan = plan(job.spec, name=job.metadata["name"], namespace="team-a", default_image="grpo-trainer:test")
    # Inside the pod the model claim is mounted at /models; here a directory stands in for it.
    return job, render_verl_config(job.spec, job_plan).replace("/models/", f"{model_root}/")


def _dry_run(capsys: pytest.CaptureFixture[str], path: Path) -> dict:
    assert main(["--config_path", str(path), "--dry-run"]) == 0
    return parse_dry_run(capsys.readouterr().out)[1]


@pytest.mark.parametrize("example", ["reference-disaggregated", "colocated-length"])
def test_rendered_example_config_passes_the_trainers_dry_run(example: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    job, text = _rendered(example, tmp_path)
    for model in (job.spec.model.path, *([job.spec.reward.model.path] if job.spec.reward.model else [])):
        (tmp_path / model).mkdir(parents=True)
        (tmp_path / model / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
    config = tmp_path / "verl.yaml"
    config.write_text(text)
    values = _dry_run(capsys, config)["verl"]
    spec = job.spec
    assert values["algorithm.adv_estimator"] == "grpo"
    assert values["actor_rollout_ref.actor.use_kl_loss"] is True
    assert values["actor_rollout_ref.actor.kl_loss_coef"] == 0.001
    assert values["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert values["actor_rollout_ref.rollout.n"] == 8
    assert values["actor_rollout_ref.rollout.temperature"] == 0.7
    assert values["actor_rollout_ref.rollout.top_p"] == 0.9
    assert values["actor_rollout_ref.rollout.tensor_model_parallel_size"] == spec.rollout.tensor_parallel_size
    assert values["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.7
    assert values["actor_rollout_ref.rollout.enable_chunked_prefill"] is True
    assert values["actor_rollout_ref.rollout.max_num_batched_tokens"] == 16384
    expected_len = int((spec.data.max_prompt_length + spec.data.max_response_length) * 1.2)
    assert values["actor_rollout_ref.rollout.max_model_len"] == expected_len
    assert values["trainer.val_before_train"] is False and values["trainer.test_freq"] == -1


def test_a_warm_started_job_starts_from_the_named_checkpoint(tmp_path: Path) -> None:
    """checkpoints.resumeFrom, rendered by the operator, becomes verl's resume_path at the trainer's start."""
    from grpo_trainer.config import build_config

    body = yaml.safe_load((EXAMPLES / "colocated-length.yaml").read_text())
    body["spec"]["checkpoints"] = {"volume": {"claimName": "team-ckpt"}, "resumeFrom": {"jobName": "warmup"}}
    job = GRPOJob.model_validate(body)
    job_plan = plan(job.spec, name="next", namespace="team-a", default_image="grpo-trainer:test")
    # The pod's mounts, as directories: /checkpoints is this job's (empty), /resume-from the other job's.
    text = render_verl_config(job.spec, job_plan)
    for mount in ("/models", "/checkpoints", "/resume-from"):
        text = text.replace(f"{mount}/", f"{tmp_path}{mount}/").replace(f"{mount}\n", f"{tmp_path}{mount}\n")
    (tmp_path / "models" / job.spec.model.path).mkdir(parents=True)
    (tmp_path / "models" / job.spec.model.path / "config.json").write_text(json.dumps({"max_position_embeddings": 8}))
    step_dir = tmp_path / "resume-from" / "global_step_120"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "model_world_size_8_rank_0.pt").write_bytes(b"x")
    (tmp_path / "resume-from" / "latest_checkpointed_iteration.txt").write_text("120")
    config = tmp_path / "verl.yaml"
    config.write_text(text)
    built = build_config(str(config), strict=True)
    assert built.verl.trainer.resume_mode == "resume_path"
    assert built.verl.trainer.resume_from_path == str(step_dir)
