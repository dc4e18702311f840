"""Chunked per-token log-probabilities: verl's row-by-row fallback's values, bit for bit, in few operations."""

from __future__ import annotations

import types

import pytest
from grpo_trainer import token_logprobs
from grpo_trainer.token_logprobs import rows_per_chunk
from grpo_trainer.token_logprobs import token_logprobs as chunked

torch = pytest.importorskip("torch")
F = torch.nn.functional


def row_by_row(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """verl 0.9.1's logprobs_from_logits_v2, as it computes (one row of the first dimension at a time)."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
        return picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
    rows = [F.log_softmax(r, dim=-1).gather(dim=-1, index=lab.unsqueeze(-1)).squeeze(-1)
            for r, lab in zip(logits, labels, strict=True)]
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(301, 1000), (3, 37, 1000)])
def test_chunked_logprobs_equal_verls_row_by_row_bit_for_bit(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(*shape, generator=gen) * 4).to(dtype)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    # 64 rows a chunk: several chunks and a short last one
    ours = chunked(logits, labels, chunk_bytes=64 * shape[-1] * logits.element_size())
    assert ours.shape == labels.shape and ours.dtype == dtype
    assert torch.equal(ours, row_by_row(logits, labels))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_chunked_logprobs_give_verls_gradient(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(130, 500, generator=gen).to(dtype)
    labels = torch.randint(0, 500, (130,), generator=gen)
    weights = torch.randn(130, generator=gen).to(dtype)
    grads = []
    for compute in (lambda x: chunked(x, labels, chunk_bytes=50 * 500 * x.element_size()),
                    lambda x: row_by_row(x, labels)):
        x = base.clone().requires_grad_(True)
        (compute(x) * weights).sum().backward()
        grads.append(x.grad)
    assert torch.allclose(grads[0].float(), grads[1].float(), rtol=0, atol=1e-6)


def test_a_sliced_batch_of_sequences_is_taken_in_chunks_of_whole_sequences() -> None:
    gen = torch.Generator().manual_seed(2)
    padded = torch.randn(5, 40, 300, generator=gen).to(torch.bfloat16)
    logits = padded[:, 8:]  # the responses of left-padded sequences: not contiguous
    labels = torch.randint(0, 300, (5, 32), generator=gen)
    assert not logits.is_contiguous()
    ours = chunked(logits, labels, chunk_bytes=2 * 32 * 300 * 2)  # two sequences a chunk
    assert torch.equal(ours, row_by_row(logits, labels))
    assert chunked(logits[:0], labels[:0]).shape == (0, 32)


def test_rows_per_chunk_bounds_the_log_softmax_and_takes_at_least_one_row() -> None:
    # Qwen2.5's vocabulary in bf16: 1766 rows of 151,936 logits in 512 MiB
    assert rows_per_chunk(151936, 2) == 1766
    assert rows_per_chunk(151936, 2) * 151936 * 2 <= token_logprobs.CHUNK_BYTES
    assert rows_per_chunk(10**9, 4) == 1


def test_install_replaces_verls_fallback_and_leaves_a_verl_without_it_alone() -> None:
    module = types.ModuleType("verl.utils.torch_functional")
    module.logprobs_from_logits_v2 = row_by_row  # type: ignore[attr-defined]
    token_logprobs.install(module)
    assert module.logprobs_from_logits_v2 is chunked  # type: ignore[attr-defined]

    other = types.ModuleType("verl.utils.torch_functional")
    token_logprobs.install(other)
    assert not hasattr(other, "logprobs_from_logits_v2")
