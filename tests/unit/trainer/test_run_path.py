"""grpo-train's real (non-dry) path up to verl's TaskRunner: data prep, verl's validate_config, verl's
run_ppo starting Ray with our runtime_env, and our extensions active inside the TaskRunner actor.
The TaskRunner is a probe instead of verl's (which would need GPUs and vLLM). The data is prepared
while the TaskRunner actor starts: its constructor runs before the preparation ends."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from grpo_trainer import cli

FIXTURES = Path(__file__).parent / "fixtures"


def _probe_init(self: Any, marker: str) -> None:
    Path(marker).write_text("constructed")


def _probe_run(self: Any, config: Any) -> None:
    import os

    from grpo_trainer import placement

    # The hook patches verl's pools when verl's TaskRunner imports them, not before.
    before_import = placement.installed_role_resources()
    from verl.single_controller.ray import base  # noqa: F401  as verl's TaskRunner does
    from verl.utils.tracking import Tracking

    report = {
        "role_resources_before_pools_import": before_import,
        "role_resources": placement.installed_role_resources(),
        "grpo_backend_known": "grpo" in Tracking.supported_backend,
        "job": [os.environ.get("GRPO_JOB_NAMESPACE"), os.environ.get("GRPO_JOB_NAME")],
        "train_files": list(config.data.train_files),
        "val_files": list(config.data.val_files),
        "max_model_len": config.actor_rollout_ref.rollout.max_model_len,
    }
    Path(config.trainer.default_local_dir, "probe.json").write_text(json.dumps(report))


@pytest.mark.slow
def test_grpo_train_reaches_verl_task_runner_with_our_extensions_installed(
    tmp_path: Path, tokenizer_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray
    from ray import cloudpickle

    model = tmp_path / "model"
    shutil.copytree(tokenizer_model_dir, model)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 3072}))
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": "w " * n}) + "\n" for n in (1, 2, 3, 40)))
    config = tmp_path / "verl.yaml"
    config.write_text(
        (FIXTURES / "reference-verl.yaml")
        .read_text()
        .replace("/models/Qwen2-7B-Instruct", str(model))
        .replace("/data/prompts/train.jsonl", str(data))
        .replace("/checkpoints", str(tmp_path / "ckpt"))
    )
    (tmp_path / "ckpt").mkdir()

    monkeypatch.setenv("RAY_ADDRESS", "local")  # never a cluster another test started with `ray start`
    probe = type("ProbeTaskRunner", (), {"__init__": _probe_init, "run": _probe_run})
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "constructed"
    monkeypatch.setattr(
        cli,
        "task_runner_class",
        lambda _config, before_run: cli.EarlyTaskRunner(
            ray.remote(num_cpus=0)(probe), {"resources": {cli.HEAD_NODE_RESOURCE: 0.001}}, (str(marker),), before_run
        ),
    )
    seen_during_prep: list[bool] = []
    real_prepare = cli.prepare_data

    def prepare_while_the_runner_starts(built: Any) -> None:
        # the actor was created before the data prep began: its constructor runs while we wait here
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        seen_during_prep.append(marker.exists())
        real_prepare(built)

    monkeypatch.setattr(cli, "prepare_data", prepare_while_the_runner_starts)
    try:
        code = cli.main(
            [
                "--config_path",
                str(config),
                "data.max_prompt_length=20",
                "ray_kwargs.ray_init.num_cpus=2",
                "+ray_kwargs.ray_init.include_dashboard=false",
            ]
        )
    finally:
        ray.shutdown()
    assert code == 0
    assert seen_during_prep == [True]
    out = capsys.readouterr().out
    # Ray and the TaskRunner started before verl was imported, and verl agreed (grpo_trainer.startup.ray_start)
    assert "grpo-train: ray init kwargs: " in out and "given up" not in out
    report = json.loads((tmp_path / "ckpt" / "probe.json").read_text())
    assert report["role_resources"] == {
        "actor": "grpo.dev/actor",
        "rollout": "grpo.dev/rollout",
        "reward": "grpo.dev/reward",
    }
    assert report["grpo_backend_known"] is True
    assert report["role_resources_before_pools_import"] is None  # nothing of verl loaded by the hook itself
    assert report["job"] == ["team-a", "qwen2-7b-length"]
    assert report["max_model_len"] == int((20 + 2048) * 1.2)
    train = tmp_path / "ckpt" / "data" / "train.parquet"
    assert report["train_files"] == [str(train)]
    assert Path(report["val_files"][0]).is_file()

    import pyarrow.parquet as pq

    assert pq.read_table(train).num_rows == 3  # the 40-word prompt (45 tokens) is over 20: dropped
