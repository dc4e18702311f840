"""Check a merged HF directory against an FSDP checkpoint, one tensor at a time, without a second copy.

    .venv/bin/python bench/export/compare_to_checkpoint.py CKPT_ACTOR_DIR HF_DIR [--dtype bf16]

Each tensor is rebuilt from the rank files by grpo-export's merger (the code whose output the
tests check against unsharded models) and compared with ``torch.equal`` to the tensor of the same
name in HF_DIR. Used for the 7B shape, where the disk cannot hold two 15 GB outputs side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from grpo_trainer.export.layout import discover
from grpo_trainer.export.pipeline import out_dtype_fn
from grpo_trainer.export.source import Source
from safetensors import safe_open


def weight_map(d: Path) -> dict[str, Path]:
    index = d / "model.safetensors.index.json"
    if index.exists():
        return {k: d / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        return dict.fromkeys(f.keys(), d / "model.safetensors")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path)
    p.add_argument("hf_dir", type=Path)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "keep"])
    args = p.parse_args()
    source = Source(discover(args.checkpoint))
    pick = out_dtype_fn(args.dtype)
    files = weight_map(args.hf_dir)
    expected = {plan.key for plan in source.plans}
    bad = sorted(set(files) ^ expected)
    for plan in source.plans:
        if plan.key not in files:
            continue
        with safe_open(str(files[plan.key]), framework="pt") as f:
            theirs = f.get_tensor(plan.key)
        ours = source.merged(plan, pick(plan.dtype))
        if theirs.dtype != ours.dtype or not torch.equal(theirs, ours):
            bad.append(plan.key)
    n = len(set(files) & expected)
    print(f"{n} tensors compared, {len(bad)} differ" + (f": {bad[:5]}" if bad else " (bit-identical)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
