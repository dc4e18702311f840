"""A preflight pod's filesystem in a temporary directory: the operator's rendered verl.yaml, with the
claims' mount points (/models, /data, /checkpoints, /etc/grpo/reward) moved under it.

A uniquely named module (not conftest) so the preflight tests import it by name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import plan
from grpo_operator.render import render_verl_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "colocated-length.yaml"
# A small decoder-only shape (no model_type: transformers 5 would then prefer that model's tokenizer).
TINY_SHAPE = {
    "vocab_size": 16,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "tie_word_embeddings": True,
}
QWEN2_7B_SHAPE = {
    "vocab_size": 152064,
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class PodFiles:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / "models" / "Qwen2-7B-Instruct"

    @property
    def prompts(self) -> Path:
        return self.root / "data" / "prompts" / "train.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def reward_dir(self) -> Path:
        return self.root / "reward"

    @property
    def config(self) -> Path:
        return self.root / "verl.yaml"


def lay_out(
    root: Path,
    tokenizer_dir: Path,
    *,
    shape: dict[str, Any] | None = None,
    max_position_embeddings: int = 4096,
    prompts: list[str] | None = None,
) -> PodFiles:
    """The model (tokenizer, config.json, a weights file), prompts and an empty checkpoint volume."""
    files = PodFiles(root)
    files.model.mkdir(parents=True)
    for item in tokenizer_dir.iterdir():
        if item.name != "config.json":
            (files.model / item.name).write_bytes(item.read_bytes())
    config = {**(shape or TINY_SHAPE), "max_position_embeddings": max_position_embeddings}
    (files.model / "config.json").write_text(json.dumps(config))
    (files.model / "model.safetensors").write_bytes(b"")
    files.prompts.parent.mkdir(parents=True)
    rows = prompts if prompts is not None else ["Say OK."] * 300
    files.prompts.write_text("".join(json.dumps({"prompt": p, "ground_truth": "OK."}) + "\n" for p in rows))
    files.checkpoints.mkdir()
    files.reward_dir.mkdir()
    return files


def render(files: PodFiles, edit: Callable[[dict[str, Any]], object] | None = None) -> Path:
    """The colocated example (after `edit` changed its camelCase spec) rendered as the pod reads it."""
    spec_body = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text())["spec"])
    if edit is not None:
        edit(spec_body)
    spec = GRPOJobSpec.model_validate(spec_body)
    text = render_verl_config(spec, plan(spec, name="qwen2-7b-length", namespace="team-a", default_image="t"))
    for mount, here in (("/etc/grpo/reward/", files.reward_dir), ("/models/", files.root / "models"),
                        ("/data/", files.root / "data"), ("/checkpoints", files.checkpoints)):
        text = text.replace(mount, f"{here}/" if mount.endswith("/") else str(here))
    files.config.write_text(text)
    return files.config


def write_words(count: int) -> str:
    """A prompt of `count` words: count + 5 tokens with the test tokenizer's chat template."""
    return " ".join(["w"] * count)
