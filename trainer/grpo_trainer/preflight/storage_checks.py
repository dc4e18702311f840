"""The checkpoint directory: writable by the trainer's user, with room for a checkpoint.

The probe writes one small file of its own and removes it; nothing else on the volume is touched.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from grpo_trainer.preflight.verdict import Check

FIELD = "spec.checkpoints.volume"
# verl's FSDP checkpoint per parameter: fp32 weights (4) and AdamW's two fp32 moments (8), plus the
# HuggingFace config/tokenizer (negligible).
CHECKPOINT_BYTES_PER_PARAM = 12


def writable(directory: str) -> Check:
    probe = Path(directory) / f".grpo-preflight-{uuid.uuid4().hex}"
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as fh:
            fh.write(b"grpo preflight\n")
            fh.flush()
            os.fsync(fh.fileno())
        text = probe.read_bytes()
    except OSError as e:
        return Check("checkpoints.writable", FIELD, False,
                     f"cannot write to {directory} as uid {os.getuid()}: {e.strerror or e}", directory,
                     "give the trainer's user (uid 1000) write access to the claim, or use another claim")
    finally:
        with contextlib.suppress(OSError):  # the directory was never there: nothing was written
            probe.unlink(missing_ok=True)
    if text != b"grpo preflight\n":
        return Check("checkpoints.writable", FIELD, False, f"{directory} did not read back what was written",
                     directory, "check the volume's storage")
    return Check("checkpoints.writable", FIELD, True, f"{directory} written and read back", directory)


def free_space(directory: str, params: int | None, keep: int) -> Check:
    if params is None:
        return Check("checkpoints.free_space", FIELD, True, "model size unknown; not checked", directory)
    try:
        stats = os.statvfs(directory)
    except OSError as e:
        return Check("checkpoints.free_space", FIELD, True, f"cannot stat {directory}: {e}; not checked", directory)
    free = stats.f_bavail * stats.f_frsize
    one = params * CHECKPOINT_BYTES_PER_PARAM
    value = f"{free / 2**30:.1f} GiB free; one checkpoint about {one / 2**30:.1f} GiB"
    if free < one:
        return Check("checkpoints.free_space", FIELD, False,
                     f"{value}: the first save would fail", value,
                     f"use a checkpoint volume of at least {keep * one / 2**30:.0f} GiB ({keep} kept)")
    return Check("checkpoints.free_space", FIELD, True, value, value)
