"""Refusals: non-zero exit, a message naming the problem and the fix, and nothing half-written."""

from __future__ import annotations

import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from grpo_trainer.export import safetensors_stream, target
from grpo_trainer.export.cli import main

# Spawns real FSDP processes once per session for its checkpoints (tens of seconds on 2 CPUs).
pytestmark = pytest.mark.slow


def _run(checkpoint: Path, out: Path, *extra: str) -> tuple[int, dict[str, object]]:
    log = out.parent / f"{out.name}-termination-log"
    code = main(["--checkpoint", str(checkpoint), "--target", str(out), "--termination-log", str(log), *extra])
    return code, json.loads(log.read_text())


def _actor(root: Path) -> Path:
    return root / "global_step_1" / "actor"


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".grpo-export-" in p.name)


def test_missing_rank_is_refused_naming_the_rank(ckpt_copy: Path, tmp_path: Path) -> None:
    (_actor(ckpt_copy) / "model_world_size_2_rank_1.pt").unlink()
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 2
    assert summary["reason"] == "MissingRanks" and "missing ranks [1]" in str(summary["message"])
    assert "Fix:" in str(summary["message"])
    assert not (tmp_path / "hf").exists()


def test_world_size_in_fsdp_config_disagreeing_with_rank_files_is_refused(ckpt_copy: Path, tmp_path: Path) -> None:
    (_actor(ckpt_copy) / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 4}))
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 2 and summary["reason"] == "WorldSizeMismatch"
    assert "world_size=4" in str(summary["message"])


def test_rank_files_of_a_mesh_larger_than_the_world_are_refused(ckpt_copy: Path, tmp_path: Path) -> None:
    # Only rank 0 of a 2-rank save, relabelled as a complete world of 1: the DTensor mesh gives it away.
    actor = _actor(ckpt_copy)
    (actor / "model_world_size_2_rank_1.pt").unlink()
    (actor / "model_world_size_2_rank_0.pt").rename(actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 2 and summary["reason"] == "WorldSizeMismatch"
    assert "2 ranks" in str(summary["message"])


def test_tracker_naming_a_missing_step_is_refused(ckpt_copy: Path, tmp_path: Path) -> None:
    (ckpt_copy / "latest_checkpointed_iteration.txt").write_text("7")
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 2 and "step 7" in str(summary["message"])


def test_latest_step_is_the_tracker_step_not_the_highest_directory(ckpt_copy: Path, tmp_path: Path) -> None:
    # A half-written later step (no tracker update yet) must not be exported.
    shutil.copytree(ckpt_copy / "global_step_1", ckpt_copy / "global_step_9")
    (_actor(ckpt_copy).parent.parent / "global_step_9" / "actor" / "model_world_size_2_rank_1.pt").unlink()
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 0 and summary["step"] == 1


def test_target_with_different_weights_is_refused_and_left_untouched(ckpt_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    assert _run(ckpt_copy, out)[0] == 0
    other = tmp_path / "other"
    shutil.copytree(ckpt_copy, other)
    rank0 = _actor(other) / "model_world_size_2_rank_0.pt"
    state = torch.load(rank0, weights_only=False)
    state["model.layers.1.mlp.up_proj.weight"]._local_tensor.add_(1.0)
    torch.save(state, rank0)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    code, summary = _run(other, out)
    assert code == 2 and summary["reason"] == "TargetHasDifferentWeights"
    assert "model.layers.1.mlp.up_proj.weight" in str(summary["message"])
    assert "--overwrite" in str(summary["message"])
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    code, summary = _run(other, out, "--overwrite")
    assert code == 0 and summary["unchanged"] is False
    assert _run(other, out)[1]["unchanged"] is True


def test_target_already_holding_identical_weights_is_a_successful_no_op(ckpt_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    assert _run(ckpt_copy, out)[0] == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    code, summary = _run(ckpt_copy, out)
    assert code == 0 and summary["ok"] is True and summary["unchanged"] is True
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_target_with_unrelated_files_is_refused_without_overwrite(ckpt_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, summary = _run(ckpt_copy, out)
    assert code == 2 and summary["reason"] == "TargetNotEmpty"
    assert (out / "notes.txt").read_text() == "mine"


def test_too_small_disk_is_refused_before_anything_is_written(
    ckpt_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(target.shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 1000, 1000))
    code, summary = _run(ckpt_copy, tmp_path / "hf")
    assert code == 2 and summary["reason"] == "InsufficientDisk"
    assert "free" in str(summary["message"])
    assert not (tmp_path / "hf").exists() and _leftovers(tmp_path) == []


def test_crash_while_writing_leaves_neither_a_half_model_nor_temp_files(
    ckpt_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = safetensors_stream.ShardWriter.write
    calls = {"n": 0}

    def failing_write(self, key: str, tensor: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        real_write(self, key, tensor)

    monkeypatch.setattr(safetensors_stream.ShardWriter, "write", failing_write)
    code, summary = _run(ckpt_copy, tmp_path / "hf", "--max-shard-size", "4KB")
    assert code == 1 and summary["ok"] is False and "No space left" in str(summary["message"])
    assert not (tmp_path / "hf").exists() and _leftovers(tmp_path) == []


def test_leftover_temp_dir_of_a_killed_run_is_cleaned_up(ckpt_copy: Path, tmp_path: Path) -> None:
    stale = tmp_path / ".hf.grpo-export-tmp-99999"
    stale.mkdir()
    (stale / "model-00001-of-00002.safetensors").write_bytes(b"partial")
    assert _run(ckpt_copy, tmp_path / "hf")[0] == 0
    assert _leftovers(tmp_path) == []


def test_verification_failure_publishes_nothing(
    ckpt_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grpo_trainer.export import verify

    real = verify.verify_export

    def corrupt_then_verify(directory: Path, *args: object, **kwargs: object) -> dict[str, object]:
        # Flip bytes at the end of the first shard (tensor data, not the header) before verifying.
        shard = sorted(directory.glob("*.safetensors"))[0]
        data = bytearray(shard.read_bytes())
        data[-8:] = bytes(b ^ 0xFF for b in data[-8:])
        shard.write_bytes(bytes(data))
        return real(directory, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "verify_export", corrupt_then_verify)
    code, summary = _run(ckpt_copy, tmp_path / "hf", "--verify")
    assert code == 3 and summary["reason"] == "VerificationFailed"
    assert not (tmp_path / "hf").exists() and _leftovers(tmp_path) == []
