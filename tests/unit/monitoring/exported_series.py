"""The sample names the operator and the trainer export, as Prometheus stores them."""

from __future__ import annotations

import re

from grpo_operator import metrics as operator_metrics  # noqa: F401  registers the operator's series
from grpo_trainer.progress.prometheus import TrainerMetrics
from prometheus_client import REGISTRY

SERIES = re.compile(r"\b(grpo_(?:operator|trainer)_[a-z_]+)")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}


def exported() -> set[str]:
    """Counters get _total, histograms _bucket/_sum/_count; by family, since labelled families without
    children have no samples yet."""
    names: set[str] = set()
    for registry in (REGISTRY, TrainerMetrics().registry):
        for family in registry.collect():
            names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names


def named_in(expr: str) -> set[str]:
    return set(SERIES.findall(expr))
