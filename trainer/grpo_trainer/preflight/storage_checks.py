"""The checkpoint directory: writable by the trainer's user, with room for its checkpoints.

On an existing claim the probe writes one small file of its own and removes it; nothing else on the volume is
touched. A claim the operator creates for the job is not mounted by the preflight (a zonal disk binds in the zone
of its first pod, which must be the actor's): its requested size is judged instead.

Room: `keep` checkpoints plus the one being written. verl prunes to keep-1 before it saves, but a save that
fails half-way leaves its directory behind, and the next retry saves again beside it.
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


def needed_bytes(params: int, keep: int) -> int:
    """Room for `keep` checkpoints of a model of `params` parameters and the one being written."""
    return (keep + 1) * params * CHECKPOINT_BYTES_PER_PARAM


def _gib(amount: int) -> str:
    return f"{amount / 2**30:.1f} GiB"


# A new claim the operator sizes itself: room for `keep` + 1 checkpoints, a tenth more for the HuggingFace config,
# tokenizer and data-loader state beside each, rounded up to whole GiB; never below what a job without a known model
# gets.
SIZED_MARGIN = 1.1
DEFAULT_CLAIM_BYTES = 100 * 2**30


def sized_claim_bytes(params: int, keep: int) -> int:
    return max(-(-int(needed_bytes(params, keep) * SIZED_MARGIN) // 2**30) * 2**30, DEFAULT_CLAIM_BYTES)


def new_claim(size: int | None, params: int | None, keep: int) -> tuple[list[Check], int | None]:
    """The checks of a checkpoint claim the operator creates, and the size to create it with when `size` is None
    (spec.checkpoints.volume.size empty: the operator sizes it for the model; None when the model's size is
    unknown, and the operator's default is used)."""
    placed = Check("checkpoints.writable", FIELD, True,
                   "a new claim for this job: bound where the actor runs, so not mounted by the preflight; its pods "
                   "write it as the trainer's group (fsGroup)", "new claim")
    if params is None:
        return [placed, Check("checkpoints.size", FIELD, True, "model size unknown; not checked",
                              _gib(size) if size is not None else "default")], None
    one, needed = params * CHECKPOINT_BYTES_PER_PARAM, needed_bytes(params, keep)
    room = f"one checkpoint about {_gib(one)}, {keep} kept + 1 being written: {_gib(needed)}"
    if size is None:
        chosen = sized_claim_bytes(params, keep)
        return [placed, Check("checkpoints.size", FIELD, True, f"{_gib(chosen)} chosen for the new claim; {room}",
                              _gib(chosen))], chosen
    value = f"{_gib(size)} requested; {room}"
    if size < needed:
        return [placed, Check("checkpoints.size", FIELD, False, f"{value}: a save would fail once the volume is full",
                              value, f"set spec.checkpoints.volume.size to at least {-(-needed // 2**30)}Gi, remove "
                              "it to have the claim sized for the model, or lower spec.checkpoints.keep")], None
    return [placed, Check("checkpoints.size", FIELD, True, value, value)], None


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
                     f"use a checkpoint volume of at least {-(-needed_bytes(params, keep) // 2**30)} GiB ({keep} "
                     "kept and one being written)")
    return Check("checkpoints.free_space", FIELD, True, value, value)
