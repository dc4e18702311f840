"""The export as one function: check everything that can be checked, then write, verify, publish."""

from __future__ import annotations

import json
import queue
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.hf_files import (
    CardInfo,
    copy_side_files,
    declared_ties,
    ensure_generation_config,
    load_config,
    model_card,
    write_config,
)
from grpo_trainer.export.layout import discover
from grpo_trainer.export.safetensors_stream import Entry, ShardWriter, index_json, nbytes, plan_shards
from grpo_trainer.export.source import Source, TensorPlan
from grpo_trainer.export.target import (
    check_disk,
    existing_weight_map,
    human,
    inspect_target,
    publish,
    remove_stale_temps,
    temp_dir_for,
)

DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp32": torch.float32, "keep": None}
MANIFEST = "grpo_export.json"


@dataclass(frozen=True)
class ExportOptions:
    checkpoint: Path
    target: Path
    max_shard_bytes: int = 10 * 10**9
    dtype: str = "bf16"
    verify: bool = False
    overwrite: bool = False
    fsync: bool = True
    job: str | None = None
    reward: float | None = None
    base_model: str | None = None


@dataclass(frozen=True)
class ExportResult:
    path: str
    step: int | None
    size_bytes: int
    dtype: str
    shards: int
    tensors: int
    world_size: int
    source: str
    verified: bool
    unchanged: bool
    seconds: float

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "step": self.step,
            "sizeBytes": self.size_bytes,
            "dtype": self.dtype,
            "shards": self.shards,
            "tensors": self.tensors,
            "worldSize": self.world_size,
            "source": self.source,
            "verified": self.verified,
            "unchanged": self.unchanged,
            "seconds": round(self.seconds, 1),
        }


def out_dtype_fn(choice: str) -> Callable[[torch.dtype], torch.dtype]:
    """Only floating tensors change dtype; integer buffers keep theirs."""
    target = DTYPES[choice]

    def pick(src: torch.dtype) -> torch.dtype:
        return target if target is not None and src.is_floating_point else src

    return pick


class Progress:
    """Line-based progress (Job logs are not terminals): at most one line every few seconds."""

    def __init__(self, total_bytes: int, log: Callable[[str], None], every_s: float = 2.0) -> None:
        self.total, self.done, self.log, self.every = total_bytes, 0, log, every_s
        self.start = self.last = time.monotonic()

    def advance(self, n: int, what: str, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            pct = 100.0 * self.done / max(self.total, 1)
            self.log(f"{what}: {pct:5.1f}% {human(self.done)} of {human(self.total)} ({human(rate)}/s)")


def _compare_with_existing(
    source: Source,
    plans: list[TensorPlan],
    out_dtype_for: Callable[[torch.dtype], torch.dtype],
    target: Path,
    log: Callable[[str], None],
) -> str | None:
    """None when the target already holds exactly these weights, else the first difference."""
    from safetensors import safe_open

    weight_map = existing_weight_map(target)
    if weight_map is None:
        return "it holds weights that are not safetensors"
    wanted = {p.key for p in plans}
    if set(weight_map) != wanted:
        diff = sorted(set(weight_map) ^ wanted)[:3]
        return f"its tensor names differ (e.g. {diff})"
    progress = Progress(sum(p.numel for p in plans), log)
    for plan in plans:
        with safe_open(str(weight_map[plan.key]), framework="pt") as f:
            have = f.get_tensor(plan.key)
        want = source.merged(plan, out_dtype_for(plan.dtype))
        if have.dtype != want.dtype or have.shape != want.shape or not torch.equal(have, want):
            return f"tensor {plan.key!r} differs"
        progress.advance(plan.numel, "comparing with existing target")
    return None


def merge_and_write(
    source: Source,
    out_dtype_for: Callable[[torch.dtype], torch.dtype],
    writer: ShardWriter,
    progress: Progress,
) -> None:
    """Merge tensor i+1 while tensor i is written: two reusable buffers of the largest tensor.

    Merging (copy + dtype cast) and writing (copy into the page cache, disk writeback) both release
    the GIL, so a single writer thread overlaps them; FIFO order keeps the planned file layout.
    Peak memory stays at two of the largest tensor, whatever the model size.
    """
    plans = source.plans
    if not plans:
        return
    largest = max(nbytes(p.shape, out_dtype_for(p.dtype)) for p in plans)
    free: queue.Queue[torch.Tensor] = queue.Queue()
    for _ in range(2):
        free.put(torch.empty(max(largest, 1), dtype=torch.uint8))

    def write(key: str, tensor: torch.Tensor, raw: torch.Tensor) -> None:
        try:
            writer.write(key, tensor)
            progress.advance(tensor.numel() * tensor.element_size(), "merging")
        finally:
            free.put(raw)  # always hand the buffer back, or the merging loop would wait forever

    futures: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpo-export-writer") as pool:
        for plan in plans:
            raw = free.get()
            if any(f.done() and f.exception() for f in futures):
                free.put(raw)
                break
            dtype = out_dtype_for(plan.dtype)
            out = raw[: nbytes(plan.shape, dtype)].view(dtype).view(plan.shape)
            try:
                source.merged(plan, dtype, out=out)
            except BaseException:
                free.put(raw)
                raise
            futures.append(pool.submit(write, plan.key, out, raw))
    for f in futures:
        f.result()


_T0 = time.monotonic()


def stderr_log(message: str) -> None:
    """Elapsed seconds in front of every line: a Job log then shows where the time went."""
    print(f"[{time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def run_export(opts: ExportOptions, log: Callable[[str], None] = stderr_log) -> ExportResult:
    started = time.monotonic()
    layout = discover(opts.checkpoint)
    log(
        f"checkpoint {layout.actor_dir} (step {layout.step}, world size {layout.world_size}, "
        f"{human(layout.source_bytes)} in rank files)"
    )
    config = load_config(layout.hf_dir)
    source = Source(layout)
    # FSDP2 state dicts share the tied storage, so the tie is already known; only FSDP1 (clones per
    # key) needs the model config's view, which costs a transformers import.
    declared = {} if source.aliases else declared_ties(layout.hf_dir)
    if declared:
        adopted = source.adopt_declared_ties(declared)
        if adopted:
            log(f"config ties {adopted} to {[declared[a] for a in adopted]} and the values match: stored once")
    out_dtype_for = out_dtype_fn(opts.dtype)
    entries = [Entry(p.key, p.shape, out_dtype_for(p.dtype)) for p in source.plans]
    metadata = {"format": "pt"}
    shards = plan_shards(entries, opts.max_shard_bytes)
    size = sum(s.file_bytes(metadata) for s in shards)
    dtype_name = opts.dtype if opts.dtype != "keep" else ",".join(sorted({str(e.dtype)[6:] for e in entries}))
    if source.aliases:
        log(f"tied weights stored once: {source.aliases}")

    def result(unchanged: bool, verified: bool) -> ExportResult:
        return ExportResult(
            str(opts.target),
            layout.step,
            size,
            dtype_name,
            len(shards),
            len(entries),
            layout.world_size,
            str(layout.actor_dir),
            verified,
            unchanged,
            time.monotonic() - started,
        )

    state = inspect_target(opts.target)
    if state.has_weights and not opts.overwrite:
        log(f"target {opts.target} already holds weights: comparing them with the checkpoint")
        difference = _compare_with_existing(source, source.plans, out_dtype_for, opts.target, log)
        if difference is None:
            log("target already holds exactly these weights: nothing to do")
            return result(unchanged=True, verified=False)
        raise ExportError(
            "TargetHasDifferentWeights",
            f"Target {opts.target} already holds a different model: {difference}.",
            "Choose another --target, or pass --overwrite to replace it.",
        )
    if state.exists and not state.is_empty and not state.has_weights and not opts.overwrite:
        raise ExportError(
            "TargetNotEmpty",
            f"Target {opts.target} exists and holds other files.",
            "Choose an empty or new --target, or pass --overwrite to replace it.",
        )

    opts.target.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temps(opts.target):
        log(f"removed leftover temp dir of an interrupted export: {stale}")
    check_disk(opts.target, size)

    tmp = temp_dir_for(opts.target)
    tmp.mkdir()
    try:
        log(f"writing {len(entries)} tensors ({human(size)}, {opts.dtype}) in {len(shards)} shard(s) to {tmp}")
        writer = ShardWriter(tmp, shards, metadata, durable=opts.fsync)
        progress = Progress(sum(s.data_bytes for s in shards), log)
        try:
            merge_and_write(source, out_dtype_for, writer, progress)
        except BaseException:
            writer.abort()
            raise
        progress.advance(0, "merged and written", force=True)
        writer.finish()
        log("shards complete" + (" and flushed to disk" if opts.fsync else ""))
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index_json(shards, {}), indent=2) + "\n")
        copy_side_files(layout.hf_dir, tmp)
        floats = {e.dtype for e in entries if e.dtype.is_floating_point}
        write_config(config, floats.pop() if len(floats) == 1 else None, tmp)
        ensure_generation_config(config, tmp)
        card = CardInfo(
            opts.base_model,
            opts.job,
            layout.step,
            opts.reward,
            layout.world_size,
            dtype_name,
            str(layout.actor_dir),
        )
        (tmp / "README.md").write_text(model_card(card))
        verified = False
        if opts.verify:
            from grpo_trainer.export.verify import verify_export

            verify_export(tmp, source, out_dtype_for, log)
            verified = True
        res = result(unchanged=False, verified=verified)
        (tmp / MANIFEST).write_text(json.dumps(res.to_json(), indent=2) + "\n")
        publish(tmp, opts.target, durable=opts.fsync)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"published {opts.target} ({human(size)})")
    return result(unchanged=False, verified=verified)
