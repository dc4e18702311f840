"""Checkpoints written by real FSDP2 on CPU (gloo), one process per rank, cached across runs by their inputs
(tests/fsdp_checkpoints.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fsdp_checkpoints import WriterSpec, cached_checkpoint, copy_checkpoint

# Odd sizes on purpose: 40 and 36 do not split evenly over 4 ranks' chunks of every dim, and
# vocab 98 over 4 ranks gives torch.chunk's short last chunk (25, 25, 25, 23).
TINY_QWEN2 = {
    "vocab_size": 98,
    "hidden_size": 32,
    "intermediate_size": 36,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "tie_word_embeddings": True,
}

# name -> (world size, how FSDP lays out the parameters in that checkpoint)
LAYOUTS: dict[str, tuple[int, dict[str, object]]] = {
    "fsdp2-w1": (1, {}),
    # 1-d mesh; down_proj and o_proj sharded on dim 1; the final norm left out of FSDP (plain tensor).
    "fsdp2-w2": (
        2,
        {"shard_dim1": ["mlp.down_proj.weight", "self_attn.o_proj.weight"], "ignored": ["model.norm.weight"]},
    ),
    # HSDP 2x2 mesh ("ddp", "fsdp"): every parameter is (Replicate(), Shard(d)); down_proj on dim 1.
    "fsdp2-hsdp-w4": (4, {"shard_dim1": ["mlp.down_proj.weight"], "hsdp": True}),
    # verl's default strategy "fsdp": FSDP1 SHARDED_STATE_DICT (each key its own clone, tie invisible).
    "fsdp1-w2": (2, {"fsdp_version": 1}),
}


def spec_for(name: str) -> WriterSpec:
    world, extra = LAYOUTS[name]
    return WriterSpec(out_root="", world_size=world, config=dict(TINY_QWEN2), **extra)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def checkpoint_for() -> Callable[[str], Path]:
    """layout name -> checkpoint root (read-only: the cache's own copy)."""
    return lambda name: cached_checkpoint(spec_for(name))


@pytest.fixture(scope="session", params=list(LAYOUTS))
def fsdp_checkpoint(request: pytest.FixtureRequest, checkpoint_for: Callable[[str], Path]) -> Path:
    """Checkpoint root (holds latest_checkpointed_iteration.txt, global_step_1/actor, reference.pt)."""
    return checkpoint_for(str(request.param))


@pytest.fixture()
def ckpt_copy(tmp_path: Path) -> Path:
    """A private copy of the world-size-2 checkpoint that a test may damage."""
    return copy_checkpoint(spec_for("fsdp2-w2"), tmp_path / "ckpt")
