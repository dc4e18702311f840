"""Per-token log-probabilities of the sampled tokens, a chunk of rows at a time instead of one row at a time.

verl 0.9.1 computes every log-probability the actor, the reference model and the old policy need through
`verl.utils.torch_functional.logprobs_from_logits`. With flash-attn's Triton cross-entropy it is one kernel;
without flash-attn (our trainer image has none, nor does any image built from plain PyPI wheels) it falls back
to `logprobs_from_logits_v2`, which loops in Python over the first dimension of the logits to bound the
memory of the log-softmax. verl hands it the packed logits, (tokens, vocab), so the loop runs once per token:
24,576 iterations of log_softmax + gather per micro-batch of 32 sequences of 768 tokens, a few kernel
launches each and as many autograd nodes in the update. On one H100 that made the 0.5B model's forward
passes run at about 13,000 tokens/s (bench/gpu/RESULTS.md, session 2026-12-06 b: old_log_prob 26 s, ref
25 s, update_actor 88 s of a 165-s step), with one CPU core busy and the GPU waiting on it.

`token_logprobs` computes the same values with the same per-row operations on chunks of rows whose
log-softmax is at most CHUNK_BYTES: the memory bound v2 was written for, and tens of launches per
micro-batch instead of tens of thousands. Per row it is v2's arithmetic (log_softmax then gather for
bf16/fp16; gather minus logsumexp for fp32/fp64). On an H100 (bench/gpu/logprobs.py, 2026-12-06 c) the bf16
log-probabilities and their gradients are bit-for-bit v2's, 113x faster forward and 162x forward and backward
for 24,576 x 151,936 logits; in fp32 (which verl's bf16 actor does not hand it) the GPU's logsumexp over a
chunk rounds differently from its logsumexp over one row, so there the values agree to rounding, not bit for
bit. On the CPU both are bit for bit (tests/unit/trainer/test_token_logprobs.py).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

TORCH_FUNCTIONAL_MODULE = "verl.utils.torch_functional"
REPLACED = "logprobs_from_logits_v2"
# The largest log-softmax one chunk materialises: rows x vocab x the logits' element size.
CHUNK_BYTES = 512 * 2**20

log = logging.getLogger(__name__)


def rows_per_chunk(row_elements: int, element_size: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Pure: how many rows of `row_elements` logits fit one chunk (at least one)."""
    return max(chunk_bytes // max(row_elements * element_size, 1), 1)


def token_logprobs(logits: Any, labels: Any, chunk_bytes: int = CHUNK_BYTES) -> Any:
    """log p(label) for every position: logits (..., vocab), labels (...) -> (...), in logits' dtype."""
    import torch
    import torch.nn.functional as F

    vocab = logits.shape[-1]
    if logits.numel() == 0:
        return logits.new_empty(labels.shape)
    # Chunks along the first dimension, as v2 loops: a sliced (non-contiguous) input is copied a chunk at a time,
    # never whole.
    rows = rows_per_chunk(logits[0].numel(), logits.element_size(), chunk_bytes)
    exact = logits.dtype in (torch.float32, torch.float64)
    parts = []
    for chunk, chunk_labels in zip(logits.split(rows), labels.split(rows), strict=True):
        flat, flat_labels = chunk.reshape(-1, vocab), chunk_labels.reshape(-1, 1)
        if exact:
            # logsumexp is stable in fp32; it keeps no (rows, vocab) tensor for the backward
            parts.append(flat.gather(-1, flat_labels).squeeze(-1) - torch.logsumexp(flat, dim=-1))
        else:
            # in bf16 logsumexp loses the small differences; log_softmax accumulates in fp32
            parts.append(F.log_softmax(flat, dim=-1).gather(-1, flat_labels).squeeze(-1))
    return torch.cat(parts).reshape(labels.shape)


def setup_worker() -> None:
    """A Ray `worker_process_setup_hook` that installs this alone: for a verl run that is not grpo-train (stock
    `verl.trainer.main_ppo` given `++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=` this path), whose
    workers then compute log-probabilities as ours do. grpo-train's own hook (worker_setup) installs it too."""
    from grpo_trainer.import_hooks import when_imported

    when_imported(TORCH_FUNCTIONAL_MODULE, install)


def install(module: ModuleType) -> None:
    """Replace verl's row-by-row fallback in `verl.utils.torch_functional` (its logprobs_from_logits looks the
    name up at each call, so every engine that imported logprobs_from_logits gets the chunked one)."""
    if not hasattr(module, REPLACED):
        log.warning("%s has no %s: verl's log-probabilities are left as they are", module.__name__, REPLACED)
        return
    setattr(module, REPLACED, token_logprobs)
    log.info("%s.%s: chunked (%d MiB a chunk) instead of one row at a time", module.__name__, REPLACED,
             CHUNK_BYTES // 2**20)
