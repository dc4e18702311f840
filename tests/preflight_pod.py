"""A preflight pod's filesystem in a temporary directory: the operator's rendered verl.yaml, with the
claims' mount points (/models, /data, /checkpoints, /etc/grpo/reward) moved under it, and a tiny chat
tokenizer built locally (nothing is downloaded).

Shared by the trainer's preflight tests and the e2e tests that hand the real check's verdict to a KWOK
pod; a uniquely named module beside tests/conftest.py, so every test tier imports it by name.
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

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# The chat template renders each message as "<|im_start|> ROLE CONTENT <|im_end|>" and the generation
# prompt as "<|im_start|> assistant"; the tokenizer splits on whitespace only. So a user prompt of n
# words is n + 5 tokens, which the data-prep and preflight tests rely on.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant{% endif %}"
)
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
QWEN2_05B_SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
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


def save_tiny_chat_tokenizer(out: Path) -> Path:
    """A real fast tokenizer (whitespace word level) with CHAT_TEMPLATE, saved in `out`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<|im_start|>", "<|im_end|>", "user", "assistant", "system", "w", "Say", "OK."]
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return out


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


def render(files: PodFiles, edit: Callable[[dict[str, Any]], object] | None = None,
           example: str = "colocated-length") -> Path:
    """An example's spec (after `edit` changed its camelCase dict) rendered as the pod reads it."""
    spec_body = copy.deepcopy(yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())["spec"])
    if edit is not None:
        edit(spec_body)
    return render_spec(files, spec_body)


def render_spec(files: PodFiles, spec_body: dict[str, Any]) -> Path:
    """A GRPOJob spec (camelCase dict) rendered by the operator, with its mounts moved under `files.root`."""
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
