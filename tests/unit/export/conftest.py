"""Checkpoints written once per session by real FSDP2 on CPU (gloo), one process per rank."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from fsdp_writer import WriterSpec  # noqa: E402

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


def _write(root: Path, world_size: int, **extra: object) -> Path:
    spec = WriterSpec(out_root=str(root), world_size=world_size, config=dict(TINY_QWEN2), **extra)  # type: ignore[arg-type]
    proc = subprocess.run(
        [sys.executable, str(HERE / "fsdp_writer.py"), json.dumps(asdict(spec))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"FSDP checkpoint writer failed:\n{proc.stderr[-4000:]}")
    return root


@pytest.fixture(scope="session")
def checkpoint_for(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """layout name -> checkpoint root, each written at most once per session."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            world, extra = LAYOUTS[name]
            cache[name] = _write(tmp_path_factory.mktemp(f"ckpt_{name}"), world, **extra)
        return cache[name]

    return get


@pytest.fixture(scope="session", params=list(LAYOUTS))
def fsdp_checkpoint(request: pytest.FixtureRequest, checkpoint_for: Callable[[str], Path]) -> Path:
    """Checkpoint root (holds latest_checkpointed_iteration.txt, global_step_1/actor, reference.pt)."""
    return checkpoint_for(str(request.param))


@pytest.fixture()
def ckpt_copy(checkpoint_for: Callable[[str], Path], tmp_path: Path) -> Path:
    """A private copy of the world-size-2 checkpoint that a test may damage."""
    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint_for("fsdp2-w2"), copy)
    return copy
