"""The model directory: config.json, weights, tokenizer with a chat template, and the context it allows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_trainer.preflight.verdict import Check

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def model_config(model_dir: str, field: str) -> tuple[Check, dict[str, Any] | None]:
    """config.json read and parsed: everything else about the model starts here."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return _fail("model.config", field, model_dir, f"{path} does not exist", _path_fix(field)), None
    except (OSError, ValueError) as e:
        return _fail("model.config", field, model_dir, f"{path} cannot be read as JSON: {e}", _path_fix(field)), None
    if not isinstance(config, dict):
        return _fail("model.config", field, model_dir, f"{path} is not a JSON object", _path_fix(field)), None
    kind = config.get("model_type", "unknown")
    return Check("model.config", field, True, f"{path} read (model_type {kind})", model_dir), config


def model_weights(model_dir: str, field: str) -> Check:
    found = [p.name for pattern in WEIGHT_PATTERNS for p in sorted(Path(model_dir).glob(pattern))]
    if not found:
        return _fail(
            "model.weights", field, model_dir, f"no weight files ({', '.join(WEIGHT_PATTERNS)}) in {model_dir}",
            "point the path at a complete HuggingFace model directory (config.json, weights, tokenizer)",
        )
    return Check("model.weights", field, True, f"{len(found)} weight file(s), e.g. {found[0]}", model_dir)


def tokenizer(model_dir: str, field: str, trust_remote_code: bool) -> tuple[Check, Any]:
    """The tokenizer loads and has the chat template verl's dataset applies to every prompt."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    except Exception as e:  # transformers raises many kinds; the user needs the text
        return _fail("model.tokenizer", field, model_dir, f"tokenizer does not load: {type(e).__name__}: {e}",
                     "the model directory needs tokenizer.json or tokenizer.model with tokenizer_config.json"), None
    if not getattr(tok, "chat_template", None):
        return _fail(
            "model.tokenizer", field, model_dir,
            "the tokenizer has no chat_template: verl applies the chat template to every prompt",
            "use a chat/instruct model, or add a chat_template to its tokenizer_config.json",
        ), None
    return Check("model.tokenizer", field, True, f"{type(tok).__name__} with a chat template", model_dir), tok


def max_position_embeddings(config: dict[str, Any]) -> int | None:
    for candidate in (config, config.get("text_config") or {}):
        value = candidate.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_length(prompt: int, response: int, config: dict[str, Any]) -> Check:
    """A prompt and its response must fit the positions the model was trained for."""
    limit = max_position_embeddings(config)
    total = prompt + response
    value = f"maxPromptLength {prompt} + maxResponseLength {response} = {total}"
    if limit is None:
        return Check("model.context_length", "spec.data.maxResponseLength", True,
                     "config.json gives no max_position_embeddings; not checked", value)
    if total > limit:
        return _fail(
            "model.context_length", "spec.data.maxResponseLength", value,
            f"{total} tokens exceed the model's max_position_embeddings={limit}: vLLM cannot hold a prompt and "
            "its response in the model's context, and positions past it were never trained",
            f"lower data.maxResponseLength (or data.maxPromptLength) so that they sum to at most {limit}",
        )
    return Check("model.context_length", "spec.data.maxResponseLength", True,
                 f"{total} tokens within max_position_embeddings={limit}", value)


def _path_fix(field: str) -> str:
    return f"set {field} to a HuggingFace model directory on the claim (it must contain config.json)"


def _fail(name: str, field: str, value: str, message: str, fix: str) -> Check:
    return Check(name, field, False, message, value, fix)
