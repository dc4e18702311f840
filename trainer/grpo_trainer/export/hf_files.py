"""Everything besides the weights: config, generation config, tokenizer files and a model card."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.target import WEIGHT_SUFFIXES

_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}


@dataclass(frozen=True)
class CardInfo:
    base_model: str | None
    job: str | None
    step: int | None
    reward: float | None
    world_size: int
    dtype: str
    source: str


def load_config(hf_dir: Path) -> dict[str, object]:
    cfg = hf_dir / "config.json"
    if not cfg.exists():
        raise ExportError(
            "MissingConfig",
            f"{cfg} is missing; verl's rank 0 writes the model config there on every save.",
            "Copy config.json (and the tokenizer files) of the base model into that huggingface/ directory.",
        )
    return json.loads(cfg.read_text())


def write_config(config: dict[str, object], out_dtype: torch.dtype | None, target: Path) -> None:
    """Copy the config; the dtype it advertises must be the dtype actually written."""
    config = dict(config)
    if out_dtype is not None and out_dtype in _DTYPE_NAMES:
        for field in ("dtype", "torch_dtype"):
            if field in config or field == "dtype":
                config[field] = _DTYPE_NAMES[out_dtype]
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def copy_side_files(hf_dir: Path, target: Path) -> list[str]:
    """Tokenizer, generation config, chat template, custom code: everything but weights and config."""
    copied: list[str] = []
    for p in sorted(hf_dir.iterdir()):
        if p.is_dir() or p.name == "config.json" or p.name.endswith(WEIGHT_SUFFIXES):
            continue
        if p.name.endswith(".index.json") or p.name == "README.md":
            continue
        shutil.copy2(p, target / p.name)
        copied.append(p.name)
    return copied


def ensure_generation_config(config: dict[str, object], target: Path) -> None:
    """verl writes generation_config.json only when it could read the base model's; derive one otherwise."""
    if (target / "generation_config.json").exists():
        return
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(k) is not None}
    (target / "generation_config.json").write_text(json.dumps({**gen, "_from_model_config": True}, indent=2) + "\n")


def model_card(info: CardInfo) -> str:
    base = info.base_model or "unknown (pass --base-model)"
    reward = f"{info.reward:g}" if info.reward is not None else "not recorded"
    step = str(info.step) if info.step is not None else "unknown"
    front = ["---", "library_name: transformers", "tags:", "- grpo", "- verl", "- grpo-operator"]
    if info.base_model:
        front.append(f"base_model: {info.base_model}")
    front.append("---")
    lines = [
        *front,
        "",
        f"# {info.job or 'GRPO-trained model'}",
        "",
        f"Post-trained with GRPO (verl) from **{base}** by the GRPOJob **{info.job or 'unknown'}**.",
        "",
        "| | |",
        "|---|---|",
        f"| Base model | {base} |",
        f"| GRPOJob | {info.job or 'unknown'} |",
        f"| Training step | {step} |",
        f"| Reward at this step | {reward} |",
        f"| Weights dtype | {info.dtype} |",
        f"| Source | `{info.source}` (FSDP, world size {info.world_size}) |",
        "",
        "Converted by `grpo-export` from verl's FSDP checkpoint; every tensor was merged according to its",
        "DTensor placement.",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("<this directory>")',
        "```",
        "",
    ]
    return "\n".join(lines)


def declared_ties(hf_dir: Path) -> dict[str, str]:
    """alias -> canonical parameter name for the weights this architecture ties (e.g. lm_head).

    Built the way transformers decides it: instantiate the model on the meta device (no memory,
    no weights) and see which names share one Parameter. Empty when the config does not tie or the
    architecture cannot be built here (custom code): then nothing is dropped.
    """
    raw = json.loads((hf_dir / "config.json").read_text())
    if raw.get("tie_word_embeddings") is False:
        return {}  # the common untied case needs no transformers import
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(hf_dir))
        if not getattr(config, "tie_word_embeddings", False):
            return {}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        model.tie_weights()
    except Exception:
        return {}
    canonical: dict[int, str] = {}
    ties: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in canonical:
            ties[name] = canonical[id(param)]
        else:
            canonical[id(param)] = name
    return ties
