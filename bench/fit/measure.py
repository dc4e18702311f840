"""The preflight's memory estimate (grpo_trainer/preflight/fit.py) against what a GPU measures, phase by phase.

For Qwen2 0.5B, 1.5B and 3B shapes (configs written here; random weights built locally, nothing is
downloaded) and two micro-batch sizes, each phase runs the way verl 0.9.1 runs it on one GPU:

- actor.update: FSDP1 (one rank), fp32 master weights, bf16 mixed precision with fp32 reduction,
  gradient checkpointing (non-reentrant), the logits scaled by the temperature and turned into
  log-probs by verl's own logprobs_from_logits, a policy-gradient loss, backward, AdamW step. The
  second update is measured (AdamW's moments exist from the first step on).
- actor.log_prob: the same model, eval mode, no grad, log-probs and verl's entropy_from_logits.
- ref.log_prob: a second FSDP1 model with its weights on the CPU (CPUOffload), forward only, while the
  actor's weights and moments stay on the GPU.
- rollout: vLLM (enforce_eager, one GPU) started beside the actor's weights and moments with
  gpu_memory_utilization; its footprint (device memory taken) and the KV cache it reports.

Measured: torch's peak allocated bytes of this process during the phase (the rollout adds the device
memory vLLM's process took). Predicted: fit.py's phase total without the per-process overhead, which
torch's allocator does not see (the rollout keeps vLLM's). A JSON file gets one row per model, micro
batch and phase, with the error in percent.

  python bench/fit/measure.py --out bench/fit/results/h200.json     # one GPU; about 5 minutes on an H200
  python bench/fit/measure.py --smoke --out /tmp/fit-smoke.json     # CPU, a tiny shape: the script's test

On CPU there is no allocator peak: --smoke measures what can be counted exactly (the bytes of weights,
gradients and AdamW moments after an update) and runs every phase, so the script is known to work
before GPU time is spent on it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "trainer"))

from grpo_trainer.preflight.fit import (  # noqa: E402
    ActorLayout,
    ModelShape,
    PhasePeak,
    RolloutLayout,
    actor_log_prob,
    actor_update,
    reference_log_prob,
    rollout,
    vllm_budget,
)

# Qwen2 / Qwen2.5 shapes as their published config.json files give them.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": {"vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                   "num_key_value_heads": 2, "intermediate_size": 4864, "tie_word_embeddings": True},
    "qwen2-1.5b": {"vocab_size": 151936, "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
                   "num_key_value_heads": 2, "intermediate_size": 8960, "tie_word_embeddings": True},
    "qwen2-3b": {"vocab_size": 151936, "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
                 "num_key_value_heads": 2, "intermediate_size": 11008, "tie_word_embeddings": True},
}
TINY = {"tiny": {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": True}}
OVERHEAD_PARTS = ("training_worker_overhead", "vllm_worker_overhead")


@dataclass
class Row:
    model: str
    params: int
    micro_batch: int
    seq_len: int
    phase: str
    measured_bytes: int | None
    predicted_bytes: int
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        if not self.measured_bytes:
            return None
        return round(100.0 * (self.predicted_bytes - self.measured_bytes) / self.measured_bytes, 1)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error_pct": self.error_pct}


def visible(peak: PhasePeak, keep: tuple[str, ...] = ()) -> int:
    """A phase's bytes as one process's allocator sees them (per-process overhead left out unless kept)."""
    return sum(v for k, v in peak.parts.items() if k not in OVERHEAD_PARTS or k in keep)


# ------------------------------------------------------------------------------------------ torch side


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(device: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)


def qwen2_config(shape: dict[str, Any]) -> Any:
    from transformers import Qwen2Config

    config = Qwen2Config(**shape, max_position_embeddings=32768, architectures=["Qwen2ForCausalLM"])
    config._attn_implementation = "sdpa"
    return config


def fsdp_model(config: Any, device: str, *, forward_only: bool) -> Any:
    """An FSDP1 unit per decoder layer, as verl's engine wraps the actor (and, offloaded, the reference)."""
    import torch
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import Qwen2ForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.float32)  # verl: model_dtype fp32
    if not forward_only:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
    return FSDP(
        model,
        auto_wrap_policy=policy,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                       buffer_dtype=torch.float32),
        # On a CPU-only machine the weights are on the CPU already (and offload needs pinned CUDA memory).
        cpu_offload=CPUOffload(offload_params=True) if forward_only and device == "cuda" else None,
        device_id=torch.device(device, 0) if device == "cuda" else torch.device("cpu"),
        sync_module_states=False,
        use_orig_params=False,
    )


def _batch(micro: int, seq_len: int, vocab: int, device: str) -> Any:
    import torch

    return torch.randint(0, vocab, (micro, seq_len), device=device)


def _log_probs(model: Any, ids: Any, temperature: float, entropy: bool) -> Any:
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
    logits = logits / temperature
    log_probs = logprobs_from_logits(logits, ids[:, 1:])
    if entropy:
        entropy_from_logits(logits)
    return log_probs


def update(model: Any, optimizer: Any, ids: Any) -> None:
    log_probs = _log_probs(model, ids, temperature=0.7, entropy=False)
    loss = -(log_probs * 0.1).mean()  # the advantages' scale does not change the memory
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def log_prob(model: Any, ids: Any, entropy: bool) -> None:
    import torch

    with torch.no_grad():
        _log_probs(model, ids, temperature=0.7, entropy=entropy)


@contextlib.contextmanager
def peak(device: str) -> Iterator[dict[str, int | None]]:
    """torch's peak allocated bytes inside the block (None on CPU: no allocator statistics there)."""
    import torch

    result: dict[str, int | None] = {"bytes": None}
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    yield result
    if device == "cuda":
        torch.cuda.synchronize()
        result["bytes"] = torch.cuda.max_memory_allocated()


def state_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of weights, gradients and optimizer state tensors, each storage once."""
    seen: dict[int, int] = {}
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for state in optimizer.state.values() for v in state.values() if hasattr(v, "untyped_storage")]
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


# ------------------------------------------------------------------------------------------- vLLM side


def vllm_rollout(model_dir: str, utilization: float, max_model_len: int, kv_per_token: int) -> dict[str, int]:
    """vLLM started beside what this process holds: device bytes it took, and its KV cache bytes."""
    import torch
    from vllm import LLM

    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info()
    llm = LLM(model=model_dir, gpu_memory_utilization=utilization, max_model_len=max_model_len,
              enforce_eager=True, skip_tokenizer_init=True, dtype="bfloat16", enable_prefix_caching=False)
    free_after, _ = torch.cuda.mem_get_info()
    cache = llm.llm_engine.vllm_config.cache_config
    kv_bytes = int(cache.num_gpu_blocks or 0) * int(cache.block_size) * kv_per_token
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return {"footprint": free_before - free_after, "kv_cache": kv_bytes}


def save_bf16(config: Any, out: str) -> None:
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("cuda"):
        Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    gc.collect()
    torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------ runs


def measure_model(name: str, shape: dict[str, Any], micros: list[int], seq_len: int, device: str,
                  utilization: float | None, gpu_memory: int, log: Callable[[str], None]) -> list[Row]:
    import torch

    config = qwen2_config(shape)
    model_shape = ModelShape.from_hf_config({**shape, "model_type": "qwen2"})
    rows: list[Row] = []

    def row(micro: int, phase: str, measured: int | None, predicted: int, note: str = "") -> None:
        rows.append(Row(name, model_shape.params, micro, seq_len, phase, measured, predicted, note))
        log(f"{name} micro={micro} {phase}: measured {measured} predicted {predicted} {note}")

    vllm_dir = None
    if utilization is not None:
        vllm_dir = tempfile.mkdtemp(prefix=f"fit-{name}-")
        save_bf16(config, vllm_dir)
    actor = fsdp_model(config, device, forward_only=False)
    optimizer = torch.optim.AdamW(actor.parameters(), lr=1e-6)
    for micro in micros:
        layout = ActorLayout(gpus=1, micro_batch=micro, log_prob_micro_batch=micro, seq_len=seq_len)
        ids = _batch(micro, seq_len, shape["vocab_size"], device)
        update(actor, optimizer, ids)  # the first step creates AdamW's moments
        with peak(device) as measured:
            update(actor, optimizer, ids)
        row(micro, "actor.update", measured["bytes"], visible(actor_update(model_shape, layout)))
        states = state_bytes(actor, optimizer)
        predicted_states = sum(actor_update(model_shape, layout).parts[k]
                               for k in ("weights_fp32_shard", "adam_moments_shard"))
        row(micro, "actor.states", states, predicted_states, "weights and moments between steps, counted exactly")
        with peak(device) as measured:
            log_prob(actor, ids, entropy=True)
        row(micro, "actor.log_prob", measured["bytes"], visible(actor_log_prob(model_shape, layout)))
    reference = fsdp_model(config, device, forward_only=True)
    for micro in micros:
        layout = ActorLayout(gpus=1, micro_batch=micro, log_prob_micro_batch=micro, seq_len=seq_len)
        with peak(device) as measured:
            log_prob(reference, _batch(micro, seq_len, shape["vocab_size"], device), entropy=False)
        row(micro, "ref.log_prob", measured["bytes"], visible(reference_log_prob(model_shape, layout)))
    del reference
    gc.collect()
    if vllm_dir is not None:
        max_model_len = int(seq_len * 1.2)
        layout = RolloutLayout(1, utilization, max_model_len, 16384, colocated=True)
        actor_layout = ActorLayout(gpus=1, micro_batch=micros[0], log_prob_micro_batch=micros[0], seq_len=seq_len)
        held = torch.cuda.memory_allocated()
        got = vllm_rollout(vllm_dir, utilization, max_model_len, model_shape.kv_bytes_per_token(1))
        predicted = visible(rollout(model_shape, actor_layout, layout, gpu_memory), keep=("vllm_worker_overhead",))
        row(0, "rollout", held + got["footprint"], predicted, "actor held + vLLM's device footprint")
        row(0, "rollout.kv_cache", got["kv_cache"], vllm_budget(model_shape, layout, gpu_memory).kv_cache,
            "vLLM's reported KV cache")
    else:
        row(0, "rollout", None, 0, "vLLM not run (--smoke, or no GPU)")
    del actor, optimizer
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file of measured vs predicted rows")
    p.add_argument("--smoke", action="store_true", help="CPU, a tiny shape, no vLLM")
    p.add_argument("--models", default=",".join(SHAPES), help="comma-separated, from: " + ", ".join(SHAPES))
    p.add_argument("--micro", default="2,8", help="micro-batch sizes (sequences per GPU)")
    p.add_argument("--seq-len", type=int, default=1536, help="max prompt + max response tokens")
    p.add_argument("--utilization", type=float, default=0.5, help="vLLM gpu_memory_utilization")
    args = p.parse_args(argv)

    import torch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    shapes = TINY if args.smoke else {m: SHAPES[m] for m in args.models.split(",")}
    micros = [1, 2] if args.smoke else [int(m) for m in args.micro.split(",")]
    seq_len = 32 if args.smoke else args.seq_len
    utilization = args.utilization if device == "cuda" else None
    gpu_memory = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else 0
    if device == "cpu":
        torch.set_num_threads(min(4, os.cpu_count() or 1))
    init_distributed(device)
    started = time.monotonic()
    rows: list[Row] = []
    for name, shape in shapes.items():
        rows += measure_model(name, shape, micros, seq_len, device, utilization, gpu_memory,
                              lambda line: print(line, file=sys.stderr, flush=True))
    result = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "gpu_memory_bytes": gpu_memory,
        "torch": torch.__version__,
        "seconds": round(time.monotonic() - started, 1),
        "rows": [r.as_dict() for r in rows],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for r in rows:
        print(f"{r.model:12} micro {r.micro_batch:>2} {r.phase:16} measured {r.measured_bytes or 0:>14,} "
              f"predicted {r.predicted_bytes:>14,} error {r.error_pct}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
