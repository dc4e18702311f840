"""Shared fixtures for the trainer's CPU tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import DictConfig

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def verl_defaults() -> DictConfig:
    """verl 0.9.1's composed ppo_trainer config (hydra compose takes seconds: once per session)."""
    from grpo_trainer.config import compose_verl_defaults

    return compose_verl_defaults()


def _write_model_config(model_dir: Path, max_position_embeddings: int) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(
        # no model_type: transformers 5 would pick that model's tokenizer class over tokenizer.json
        json.dumps({"max_position_embeddings": max_position_embeddings})
    )
    return model_dir


@pytest.fixture()
def reference_yaml(tmp_path: Path) -> Path:
    """The reference fixture with its model path pointed at a model dir whose limit is 3072 tokens,
    so (1024+2048)*1.2=3686 must be clamped."""
    model = _write_model_config(tmp_path / "Qwen2-7B-Instruct", 3072)
    text = (FIXTURES / "reference-verl.yaml").read_text().replace("/models/Qwen2-7B-Instruct", str(model))
    out = tmp_path / "verl.yaml"
    out.write_text(text)
    return out


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    """A model directory with only a config.json (limit 4096 tokens): enough for config building."""
    return _write_model_config(tmp_path / "model", 4096)


@pytest.fixture(scope="session")
def tokenizer_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory with a real (tiny, locally built) fast tokenizer, chat template and config.json.

    A user prompt of n words is n + 5 tokens (preflight_pod.CHAT_TEMPLATE), which the data tests rely on."""
    from preflight_pod import save_tiny_chat_tokenizer

    out = save_tiny_chat_tokenizer(tmp_path_factory.mktemp("tiny-model"))
    _write_model_config(out, 4096)
    return out
