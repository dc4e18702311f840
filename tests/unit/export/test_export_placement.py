"""The placement arithmetic, checked against torch's own chunking."""

from __future__ import annotations

import pytest
import torch
from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.placement import (
    ShardSpec,
    chunk_range,
    local_box,
    owners,
    spec_from_placement,
)
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard


@given(length=st.integers(0, 60), chunks=st.integers(1, 9))
def test_chunk_range_matches_torch_chunk(length: int, chunks: int) -> None:
    pieces = torch.arange(length).chunk(chunks)
    for i in range(chunks):
        start, size = chunk_range(length, chunks, i)
        expected = pieces[i].tolist() if i < len(pieces) else []
        assert list(range(start, start + size)) == expected


def test_shard_on_dim1_takes_column_blocks() -> None:
    box = local_box((4, 10), (3,), (2,), (ShardSpec(1),))
    assert box.offsets == (0, 8) and box.lengths == (4, 2)


def test_hsdp_replicate_then_shard_reads_only_the_first_replica() -> None:
    mesh = [[0, 1], [2, 3]]  # ("ddp", "fsdp")
    specs = (ShardSpec(None), ShardSpec(0))
    assert owners(mesh, specs) == [(0, (0, 0)), (1, (0, 1))]
    assert local_box((5, 3), (2, 2), (0, 1), specs).offsets == (3, 0)


def test_two_mesh_dims_sharding_one_tensor_dim_nest_left_to_right() -> None:
    full = torch.arange(10)
    specs = (ShardSpec(0), ShardSpec(0))
    got = [full[local_box((10,), (2, 2), (a, b), specs).slices()].tolist() for a in (0, 1) for b in (0, 1)]
    assert got == [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9]]


def test_replicate_and_shard_are_understood() -> None:
    assert spec_from_placement("w", Replicate()) == ShardSpec(None)
    assert spec_from_placement("w", Shard(1)) == ShardSpec(1)


@pytest.mark.parametrize("placement", [Partial(), _StridedShard(0, split_factor=2)], ids=["partial", "strided"])
def test_placements_that_are_not_a_slice_are_refused_with_the_parameter_named(placement: object) -> None:
    with pytest.raises(ExportError) as err:
        spec_from_placement("model.layers.0.mlp.up_proj.weight", placement)
    assert err.value.reason == "UnsupportedPlacement"
    assert "model.layers.0.mlp.up_proj.weight" in err.value.problem
    assert "Fix:" in str(err.value)
