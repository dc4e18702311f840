"""grpo-export on checkpoints written by real FSDP on CPU/gloo: FSDP2 at world sizes 1, 2, 4 (HSDP), FSDP1 at 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from grpo_trainer.export.cli import main
from safetensors import safe_open
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

# Spawns real FSDP processes once per session for its checkpoints (tens of seconds on 2 CPUs).
pytestmark = pytest.mark.slow

INPUT = torch.tensor([[1, 5, 9, 17, 33, 64, 97, 2, 40, 11]])


def _placements(root: Path) -> dict[str, str]:
    actor = root / "global_step_1" / "actor"
    world = json.loads((actor / "fsdp_config.json").read_text())["world_size"]
    state = torch.load(actor / f"model_world_size_{world}_rank_0.pt", mmap=True, weights_only=False)
    return {k: str(getattr(v, "placements", "plain")) for k, v in state.items()}


def _reference_logits(root: Path) -> torch.Tensor:
    config = Qwen2Config.from_pretrained(root / "global_step_1" / "actor" / "huggingface")
    model = Qwen2ForCausalLM(config)
    model.load_state_dict(torch.load(root / "reference.pt"))
    with torch.no_grad():
        return model.eval()(input_ids=INPUT).logits


def _export(root: Path, target: Path, *extra: str) -> tuple[int, dict[str, object]]:
    result = target.parent / f"{target.name}-result.json"
    code = main(["--checkpoint", str(root), "--target", str(target), "--result-json", str(result), *extra])
    return code, json.loads(result.read_text())


def test_checkpoints_exercise_every_placement_kind(checkpoint_for) -> None:  # type: ignore[no-untyped-def]
    w2, w4 = _placements(checkpoint_for("fsdp2-w2")), _placements(checkpoint_for("fsdp2-hsdp-w4"))
    assert w2["model.layers.0.mlp.down_proj.weight"] == "(Shard(dim=1),)"
    assert w2["model.layers.0.mlp.up_proj.weight"] == "(Shard(dim=0),)"
    assert w2["model.norm.weight"] == "plain"
    assert w4["model.layers.1.mlp.down_proj.weight"] == "(Replicate(), Shard(dim=1))"
    assert w4["model.embed_tokens.weight"] == "(Replicate(), Shard(dim=0))"
    fsdp1 = checkpoint_for("fsdp1-w2") / "global_step_1" / "actor"
    assert json.loads((fsdp1 / "fsdp_config.json").read_text())["FSDP_version"] == 1
    assert _placements(checkpoint_for("fsdp1-w2"))["lm_head.weight"] == "(Shard(dim=0),)"


def test_merged_model_logits_equal_the_unsharded_model(fsdp_checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "hf"
    code, summary = _export(fsdp_checkpoint, target, "--dtype", "keep")
    assert code == 0, summary
    model = AutoModelForCausalLM.from_pretrained(target).eval()
    with torch.no_grad():
        logits = model(input_ids=INPUT).logits
    assert torch.equal(logits, _reference_logits(fsdp_checkpoint))


def test_every_tensor_is_bit_identical_and_tied_lm_head_is_stored_once(fsdp_checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "hf"
    assert _export(fsdp_checkpoint, target, "--dtype", "keep")[0] == 0
    reference = torch.load(fsdp_checkpoint / "reference.pt")
    index = json.loads((target / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" not in index["weight_map"]
    assert set(index["weight_map"]) == set(reference) - {"lm_head.weight"}
    for key, filename in index["weight_map"].items():
        with safe_open(str(target / filename), framework="pt") as f:
            assert torch.equal(f.get_tensor(key), reference[key]), key


def test_default_dtype_is_bf16_and_config_says_so(checkpoint_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = checkpoint_for("fsdp2-w2")
    target = tmp_path / "hf"
    code, summary = _export(root, target)
    assert code == 0 and summary["dtype"] == "bf16"
    reference = torch.load(root / "reference.pt")
    model = AutoModelForCausalLM.from_pretrained(target, dtype="auto")
    assert json.loads((target / "config.json").read_text())["dtype"] == "bfloat16"
    for key, value in model.state_dict().items():
        assert torch.equal(value, reference[key].to(torch.bfloat16)), key


def test_verify_passes_and_summary_names_path_step_and_size(checkpoint_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "hf"
    code, summary = _export(checkpoint_for("fsdp2-hsdp-w4"), target, "--verify", "--dtype", "keep")
    assert code == 0
    assert summary["ok"] is True and summary["verified"] is True
    assert summary["path"] == str(target) and summary["step"] == 1 and summary["worldSize"] == 4
    on_disk = sum(p.stat().st_size for p in target.glob("*.safetensors"))
    assert summary["sizeBytes"] == on_disk


def test_small_max_shard_size_gives_several_shards_that_load(checkpoint_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "hf"
    assert _export(checkpoint_for("fsdp2-w2"), target, "--max-shard-size", "8KB", "--dtype", "keep")[0] == 0
    index = json.loads((target / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 3 and sorted(p.name for p in target.glob("*.safetensors")) == shards
    # The embedding alone (98x32 fp32 = 12.5 KB) exceeds the limit: it gets a shard of its own.
    for name in shards:
        with safe_open(str(target / name), framework="pt") as f:
            keys = list(f.keys())
            assert len(keys) == 1 or sum(f.get_tensor(k).nbytes for k in keys) <= 8000
    model = AutoModelForCausalLM.from_pretrained(target).eval()
    with torch.no_grad():
        assert torch.equal(model(input_ids=INPUT).logits, _reference_logits(checkpoint_for("fsdp2-w2")))


def test_model_card_and_side_files_are_written(checkpoint_for, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = tmp_path / "hf"
    args = ["--job", "math-grpo", "--reward", "0.83", "--base-model", "Qwen/Qwen2.5-1.5B-Instruct"]
    assert _export(checkpoint_for("fsdp2-w2"), target, *args)[0] == 0
    card = (target / "README.md").read_text()
    for text in ("Qwen/Qwen2.5-1.5B-Instruct", "math-grpo", "| Training step | 1 |", "0.83"):
        assert text in card
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (target / name).exists(), name


@pytest.mark.parametrize("form", ["root", "step_dir", "actor_dir"])
def test_checkpoint_may_be_given_as_root_step_or_actor_dir(checkpoint_for, tmp_path: Path, form: str) -> None:  # type: ignore[no-untyped-def]
    root = checkpoint_for("fsdp2-w1")
    path = {"root": root, "step_dir": root / "global_step_1", "actor_dir": root / "global_step_1" / "actor"}[form]
    code, summary = _export(path, tmp_path / "hf", "--dtype", "keep")
    assert code == 0 and summary["step"] == 1
