"""Issue 33.1: verl's per-token log-probabilities without flash-attn, row by row (baseline) against ours, chunked.

    python bench/gpu/logprobs.py --out $OUT      # on the GPU machine, with verl importable

verl 0.9.1's `logprobs_from_logits_v2` (what `logprobs_from_logits` falls back to without flash-attn) against
`grpo_trainer.token_logprobs.token_logprobs`, on the logits of one micro-batch as the issue's benchmark makes
them: 32 sequences x 768 tokens, packed (24,576 rows) over Qwen2.5's 151,936-token vocabulary, in bf16 (what
the FSDP actor's forward returns). Timed alone on the GPU, each side in turn in ABBA order, for the forward
without gradients (old_log_prob, ref) and the forward and backward (update_actor). Prints one JSON line per
measurement, then a summary with the ratio baseline/ours and whether the outputs are bitwise equal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "trainer"))

ROWS = 32 * 768
VOCAB = 151936


def timed(fn: Callable[[], Any], cuda: bool) -> tuple[float, Any, int]:
    """Seconds of fn() with the GPU synchronised on both sides, its result, and its peak allocated bytes (0 on
    the CPU)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, result, torch.cuda.max_memory_allocated() if cuda else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each: baseline, ours, ours, baseline)")
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--vocab", type=int, default=VOCAB)
    p.add_argument("--device", default="cuda", help="cpu: a check of this script, not a measurement")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)

    import torch
    from grpo_trainer.token_logprobs import token_logprobs
    from verl.utils import torch_functional

    baseline = torch_functional.logprobs_from_logits_v2
    cuda = a.device == "cuda"
    gen = torch.Generator(device=a.device).manual_seed(0)
    logits = (torch.randn(a.rows, a.vocab, device=a.device, generator=gen) * 4).to(torch.bfloat16)
    labels = torch.randint(0, a.vocab, (a.rows,), device=a.device, generator=gen)
    weights = torch.randn(a.rows, device=a.device, generator=gen).to(torch.bfloat16)
    sides = {"baseline": baseline, "ours": token_logprobs}

    def forward(fn: Callable[..., Any]) -> Callable[[], Any]:
        def go() -> Any:
            with torch.no_grad():
                return fn(logits, labels)
        return go

    def backward(fn: Callable[..., Any]) -> Callable[[], Any]:
        def go() -> Any:
            x = logits.detach().requires_grad_(True)
            (fn(x, labels) * weights).sum().backward()
            return x.grad
        return go

    results: dict[str, Any] = {"rows": a.rows, "vocab": a.vocab, "dtype": "bfloat16", "torch": torch.__version__,
                               "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    outputs: dict[tuple[str, str], Any] = {}
    lines = []
    for phase, wrap in (("forward", forward), ("forward+backward", backward)):
        wrap(token_logprobs)()  # warm-up: the allocator and the kernels, outside the timing
        seconds: dict[str, list[float]] = {"baseline": [], "ours": []}
        peaks: dict[str, int] = {}
        for _ in range(a.rounds):
            for side in ("baseline", "ours", "ours", "baseline"):
                s, out, peak = timed(wrap(sides[side]), cuda)
                seconds[side].append(s)
                peaks[side] = max(peaks.get(side, 0), peak)
                outputs[(phase, side)] = out
                line = {"phase": phase, "side": side, "seconds": round(s, 4),
                        "peak_allocated_gib": round(peak / 2**30, 2)}
                lines.append(line)
                print(json.dumps(line), flush=True)
        base, ours = statistics.median(seconds["baseline"]), statistics.median(seconds["ours"])
        results[phase] = {"baseline_median_s": round(base, 4), "ours_median_s": round(ours, 4),
                          "baseline_over_ours": round(base / ours, 1), "seconds": seconds,
                          "peak_allocated_gib": {k: round(v / 2**30, 2) for k, v in peaks.items()},
                          "bitwise_equal": bool(torch.equal(outputs[(phase, "baseline")], outputs[(phase, "ours")]))}
        outputs.clear()
    fp32 = logits[: a.rows // 4].float()
    results["fp32_forward_bitwise_equal"] = bool(torch.equal(baseline(fp32, labels[: a.rows // 4]),
                                                             token_logprobs(fp32, labels[: a.rows // 4])))
    print(json.dumps(results), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "logprobs.json").write_text(json.dumps({"summary": results, "runs": lines}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
