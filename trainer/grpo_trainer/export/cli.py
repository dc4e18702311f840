"""grpo-export: verl FSDP checkpoint -> HuggingFace safetensors directory.

Exit codes: 0 published (or target already identical), 2 refused (message says why and how to
fix), 3 written but verification failed (nothing published), 1 unexpected error.
The last stdout line is the JSON summary; the same JSON goes to --result-json and to the
Kubernetes termination log (so the operator can copy path/step/size into GRPOJob status).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.pipeline import DTYPES, ExportOptions, run_export
from grpo_trainer.export.safetensors_stream import parse_size

DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")
# The kubelet keeps at most 4096 bytes of a termination message.
TERMINATION_LIMIT = 4096


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpo-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="global_step_N/actor dir, a global_step_N dir, or the checkpoint root (latest step)",
    )
    p.add_argument("--target", type=Path, required=True, help="output directory (published atomically)")
    p.add_argument("--max-shard-size", default="10GB", help="largest safetensors shard (default 10GB)")
    p.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="bf16",
        help="dtype of floating tensors in the output (default bf16; keep = checkpoint dtype)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="load the result with transformers, compare every tensor, run a forward pass",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a target that holds different weights")
    p.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="skip flushing the shards to disk before publishing (faster; not crash-durable)",
    )
    p.add_argument("--job", help="GRPOJob name, for the model card")
    p.add_argument("--reward", type=float, help="reward at the exported step, for the model card")
    p.add_argument("--base-model", help="base model name, for the model card")
    p.add_argument("--result-json", type=Path, help="also write the JSON summary here")
    p.add_argument(
        "--termination-log",
        type=Path,
        default=None,
        help="write the JSON summary here (default /dev/termination-log when it exists)",
    )
    return p


def _emit(summary: dict[str, object], args: argparse.Namespace) -> None:
    text = json.dumps(summary, separators=(",", ":"))
    print(text, flush=True)
    if args.result_json:
        args.result_json.parent.mkdir(parents=True, exist_ok=True)
        args.result_json.write_text(text + "\n")
    term = args.termination_log
    if term is None and DEFAULT_TERMINATION_LOG.exists():
        term = DEFAULT_TERMINATION_LOG
    if term is not None:
        if len(text.encode()) > TERMINATION_LIMIT:
            summary = {k: v for k, v in summary.items() if k in ("ok", "reason", "path", "step", "sizeBytes")}
            summary["message"] = str(summary.get("message", ""))[:3000]
            text = json.dumps(summary, separators=(",", ":"))
        try:
            term.write_text(text)
        except OSError as exc:
            print(f"grpo-export: cannot write termination log {term}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        max_shard = parse_size(args.max_shard_size)
    except ValueError as exc:
        build_parser().error(str(exc))
    opts = ExportOptions(
        checkpoint=args.checkpoint,
        target=args.target,
        max_shard_bytes=max_shard,
        dtype=args.dtype,
        verify=args.verify,
        overwrite=args.overwrite,
        fsync=args.fsync,
        job=args.job,
        reward=args.reward,
        base_model=args.base_model,
    )
    try:
        result = run_export(opts)
    except ExportError as exc:
        print(f"grpo-export: error: {exc.problem}\n  fix: {exc.fix}", file=sys.stderr)
        _emit({"ok": False, "reason": exc.reason, "message": str(exc)}, args)
        return exc.exit_code
    except Exception as exc:
        traceback.print_exc()
        _emit({"ok": False, "reason": "InternalError", "message": f"{type(exc).__name__}: {exc}"}, args)
        return 1
    _emit({"ok": True, **result.to_json()}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
