"""grpo-export vs verl's own merger on the same synthetic 8-rank FSDP2 checkpoint.

    .venv/bin/python bench/export/bench_export.py --shape 1.5b --workdir /work/bench-export

1. Writes a Qwen2-shaped checkpoint with real FSDP2 in 8 gloo processes (meta init, fully_shard,
   each rank fills only its own shards, saved by verl 0.9.1's FSDPCheckpointManager): the exact
   file format a training run leaves. Reused when it already exists.
2. Warms the page cache with one full read of the rank files, so neither tool pays the cold read.
3. Runs ``python -m verl.model_merger merge --backend fsdp`` and ``grpo-export`` (bf16 output: the
   verl merger always writes bf16) as child processes; wall time from the parent, peak RSS from
   the kernel's high-water mark of each child (``os.wait4`` -> ``ru_maxrss``).
4. Checks both outputs tensor by tensor (bit-identical) and prints a table with the ratios.

Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "unit" / "export"))

from fsdp_writer import WriterSpec  # noqa: E402

# Qwen2.5 shapes (config.json of the public checkpoints).
SHAPES: dict[str, dict[str, object]] = {
    "tiny": {
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "1.5b": {
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
    "7b": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
}


@dataclass
class Run:
    name: str
    wall_s: float
    peak_rss_bytes: int
    exit_code: int


def run_child(name: str, cmd: list[str], log: Path) -> Run:
    """Run ``cmd``; peak RSS is the kernel's high-water mark for that child (and its waited children)."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(name, wall, usage.ru_maxrss * 1024, proc.returncode)


def write_checkpoint(root: Path, shape: str, world: int, dtype: str, backend: str) -> tuple[Path, float]:
    actor = root / "global_step_1" / "actor"
    if (actor / "fsdp_config.json").exists():
        return actor, 0.0
    spec = WriterSpec(
        out_root=str(root),
        world_size=world,
        config=dict(SHAPES[shape]),
        materialize="meta",
        param_dtype=dtype,
        backend=backend,
    )
    start = time.monotonic()
    subprocess.run(
        [sys.executable, str(REPO / "tests/unit/export/fsdp_writer.py"), json.dumps(asdict(spec))], check=True, cwd=REPO
    )
    return actor, time.monotonic() - start


def warm(files: list[Path]) -> None:
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def compare_outputs(a: Path, b: Path) -> tuple[int, list[str]]:
    """Number of tensors compared, and the names that differ (or exist on one side only)."""
    import torch
    from safetensors import safe_open

    def weight_map(d: Path) -> dict[str, Path]:
        index = d / "model.safetensors.index.json"
        if index.exists():
            return {k: d / v for k, v in json.loads(index.read_text())["weight_map"].items()}
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            return dict.fromkeys(f.keys(), d / "model.safetensors")

    ma, mb = weight_map(a), weight_map(b)
    bad = sorted(set(ma) ^ set(mb))
    for key in sorted(set(ma) & set(mb)):
        with safe_open(str(ma[key]), framework="pt") as fa, safe_open(str(mb[key]), framework="pt") as fb:
            ta, tb = fa.get_tensor(key), fb.get_tensor(key)
            if ta.dtype != tb.dtype or not torch.equal(ta, tb):
                bad.append(key)
    return len(set(ma) & set(mb)), bad


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--param-dtype", default="float32", help="dtype of the checkpoint (verl keeps fp32 masters)")
    p.add_argument("--workdir", type=Path, default=Path("/work/bench-export"))
    p.add_argument("--skip-verl", action="store_true", help="only ours (e.g. a 7B that verl cannot hold in RAM)")
    p.add_argument("--keep", action="store_true", help="keep the outputs")
    p.add_argument(
        "--writer",
        choices=["gloo", "fake"],
        default="gloo",
        help="gloo: 8 ranks at once; fake: one rank at a time on torch's fake process group (same files, "
        "checked identical on an 8-rank tiny model; needs 1/8 of the RAM)",
    )
    p.add_argument("--repeat", type=int, default=2, help="runs per tool (the machine is shared: take the best)")
    args = p.parse_args()

    root = args.workdir / f"ckpt-{args.shape}-w{args.world}-{args.param_dtype}"
    actor, gen_s = write_checkpoint(root, args.shape, args.world, args.param_dtype, args.writer)
    rank_files = sorted(actor.glob("model_world_size_*_rank_*.pt"))
    ckpt_bytes = sum(f.stat().st_size for f in rank_files)
    vocab = json.loads(Path(actor / "huggingface" / "config.json").read_text())["vocab_size"]
    print(
        f"checkpoint {actor}: {len(rank_files)} rank files, {gb(ckpt_bytes)}"
        + (f" (written in {gen_s:.0f} s)" if gen_s else " (reused)"),
        flush=True,
    )

    runs: list[Run] = []
    out_bytes = 0
    outs = {
        "verl": args.workdir / f"out-verl-{args.shape}",
        "grpo-export": args.workdir / f"out-ours-{args.shape}",
        "grpo-export --no-fsync": args.workdir / f"out-ours-nofsync-{args.shape}",
    }
    commands = {
        "verl.model_merger": [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor),
            "--target_dir",
            str(outs["verl"]),
        ],
        "grpo-export": [
            sys.executable,
            "-m",
            "grpo_trainer.export",
            "--checkpoint",
            str(actor),
            "--target",
            str(outs["grpo-export"]),
            "--dtype",
            "bf16",
        ],
        "grpo-export --no-fsync": [
            sys.executable,
            "-m",
            "grpo_trainer.export",
            "--checkpoint",
            str(actor),
            "--target",
            str(outs["grpo-export --no-fsync"]),
            "--dtype",
            "bf16",
            "--no-fsync",
        ],
    }
    if args.skip_verl:
        del commands["verl.model_merger"]
    for rep in range(args.repeat):
        for name, cmd in commands.items():
            target = Path(cmd[cmd.index("--target_dir" if name.startswith("verl") else "--target") + 1])
            shutil.rmtree(target, ignore_errors=True)
            # Same start for everyone: checkpoint in the page cache (when it fits), no other run's
            # dirty pages pending.
            if ckpt_bytes < 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"):
                warm(rank_files)
            os.sync()
            runs.append(run_child(name, cmd, args.workdir / f"{name.split()[0]}-{args.shape}-{rep}.log"))
            print(f"  {name}: {runs[-1].wall_s:.1f} s, peak RSS {gb(runs[-1].peak_rss_bytes)}", flush=True)
            out_bytes = sum(f.stat().st_size for f in target.glob("*.safetensors")) or out_bytes
            if args.skip_verl:
                shutil.rmtree(target, ignore_errors=True)  # nothing to compare: free the disk for the next run

    params = out_bytes // 2
    identical = "n/a"
    if not args.skip_verl and all(r.exit_code == 0 for r in runs[-len(commands) :]):
        n, bad = compare_outputs(outs["verl"], outs["grpo-export"])
        identical = f"yes ({n} tensors)" if not bad else f"NO: {len(bad)} differ, e.g. {bad[:3]}"

    print()
    print(
        f"shape {args.shape} (~{params / 1e9:.2f}B params, vocab {vocab}), world size {args.world}, "
        f"checkpoint {args.param_dtype} {gb(ckpt_bytes)}, output bf16 {gb(out_bytes)}, cpus {os.cpu_count()}"
    )
    print(f"| {'tool':<24} | {'exit':>4} | {'wall':>8} | {'peak RSS':>10} |")
    print(f"|{'-' * 26}|{'-' * 6}|{'-' * 10}|{'-' * 12}|")
    for r in runs:
        print(f"| {r.name:<24} | {r.exit_code:>4} | {r.wall_s:>6.1f} s | {gb(r.peak_rss_bytes):>10} |")
    best = {name: min((r for r in runs if r.name == name), key=lambda r: r.wall_s) for name in commands}
    if "verl.model_merger" in best:
        verl = best["verl.model_merger"]
        print(f"\nbest of {args.repeat} (ratio = verl / ours for time, ours / verl for memory):")
        for name in ("grpo-export", "grpo-export --no-fsync"):
            ours = best[name]
            print(
                f"  {name:<24} speed-up {verl.wall_s / ours.wall_s:.2f}x, "
                f"peak RSS {ours.peak_rss_bytes / verl.peak_rss_bytes:.3f} of verl's"
            )
    print(f"tensors identical: {identical}")
    summary = {
        "shape": args.shape,
        "world": args.world,
        "checkpointBytes": ckpt_bytes,
        "outputBytes": out_bytes,
        "runs": [asdict(r) for r in runs],
        "identical": identical,
    }
    (args.workdir / f"result-{args.shape}.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not args.keep:
        for out in outs.values():
            shutil.rmtree(out, ignore_errors=True)
    return 0 if all(r.exit_code == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
