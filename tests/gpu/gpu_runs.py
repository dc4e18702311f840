"""What the gpu tests share: their marks (skipped without a GPU stack) and reading the batch's outcomes."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest


def gpu_stack_missing() -> str | None:
    for module in ("torch", "vllm", "verl", "ray"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    return None


def gpu_marks() -> list[Any]:
    missing = gpu_stack_missing()
    return [pytest.mark.gpu, pytest.mark.slow, pytest.mark.skipif(missing is not None, reason=str(missing))]


def outcome_of(batch: dict[str, Any], name: str) -> Any:
    """The run's result; fails the test with the run's error when it did not run."""
    o = batch.get(name)
    assert o is not None and o.result is not None, f"run {name} did not run: {o.error if o else 'missing'}"
    return o
