"""The pure pieces: sizes, shard planning, the safetensors header, the model card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.hf_files import CardInfo, load_config, model_card
from grpo_trainer.export.safetensors_stream import Entry, ShardWriter, parse_size, plan_shards
from safetensors.torch import load_file


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10GB", 10 * 10**9), ("500MB", 500 * 10**6), ("4GiB", 4 * 2**30), ("1.5GB", 1_500_000_000), ("123", 123)],
)
def test_sizes_use_decimal_units_like_transformers_and_binary_for_ib(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_a_size_that_is_not_a_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size("ten gigs")


def test_shards_fill_in_order_and_an_oversized_tensor_gets_its_own() -> None:
    entries = [Entry(f"t{i}", (n,), torch.float32) for i, n in enumerate([10, 10, 100, 5, 5])]
    shards = plan_shards(entries, max_shard_bytes=80)
    assert [[e.key for e in s.entries] for s in shards] == [["t0", "t1"], ["t2"], ["t3", "t4"]]
    assert shards[0].filename == "model-00001-of-00003.safetensors"


def test_streamed_shards_read_back_with_safetensors(tmp_path: Path) -> None:
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.int64),
        "c": torch.randn(2, 2).to(torch.bfloat16),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(3.5),
    }
    entries = [Entry(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    shards = plan_shards(entries, max_shard_bytes=64)
    writer = ShardWriter(tmp_path, shards, {"format": "pt"}, durable=False)
    for key, value in tensors.items():
        writer.write(key, value)
    writer.finish()
    loaded: dict[str, torch.Tensor] = {}
    for shard in shards:
        loaded.update(load_file(tmp_path / shard.filename))
    assert set(loaded) == set(tensors)
    for key, value in tensors.items():
        assert loaded[key].dtype == value.dtype and torch.equal(loaded[key], value), key


def test_writer_refuses_tensors_out_of_plan(tmp_path: Path) -> None:
    shards = plan_shards([Entry("a", (2,), torch.float32)], max_shard_bytes=100)
    writer = ShardWriter(tmp_path, shards, {"format": "pt"}, durable=False)
    with pytest.raises(RuntimeError, match="expected"):
        writer.write("a", torch.zeros(3))


def test_model_card_says_when_reward_and_base_model_are_unknown() -> None:
    card = model_card(CardInfo(None, "job-a", 40, None, 8, "bf16", "/ckpt/global_step_40/actor"))
    assert "| Reward at this step | not recorded |" in card
    assert "unknown (pass --base-model)" in card and "base_model:" not in card
    assert "| Training step | 40 |" in card


def test_missing_config_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as err:
        load_config(tmp_path)
    assert err.value.reason == "MissingConfig" and "config.json" in err.value.fix
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert load_config(tmp_path)["model_type"] == "qwen2"
