"""Read the rank files memory-mapped and rebuild one full tensor at a time.

Memory: ``torch.load(mmap=True)`` maps each rank file instead of reading it, so opening eight
rank files of a 7B model costs page tables, not 28 GB. Touched pages of a private file mapping
still count in the process RSS, so after a local shard has been copied into the output tensor its
pages are dropped again with ``madvise(MADV_DONTNEED)``: safe for a clean private file mapping
(a later touch refaults from the file), and it keeps the peak near one full tensor.

Trust: the rank files hold pickled DTensors (with their DeviceMesh), which ``weights_only=True``
cannot unpickle; they are read with ``weights_only=False`` exactly as verl's own loader does, so
only export checkpoints your trainer wrote.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpo_trainer.export.errors import ExportError
from grpo_trainer.export.layout import CheckpointLayout
from grpo_trainer.export.placement import (
    ShardSpec,
    local_box,
    mesh_ranks,
    mesh_shape_of,
    owners,
    spec_from_placement,
)

_MADV_WILLNEED = 3
_MADV_DONTNEED = 4
_MADV_POPULATE_READ = 22
_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


@dataclass(frozen=True)
class TensorPlan:
    """Everything about one output tensor that is known without reading its data."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    # None: a plain tensor, the same full copy on every rank (buffers, params FSDP did not wrap).
    specs: tuple[ShardSpec, ...] | None
    mesh: Any  # nested list of global ranks, as DeviceMesh.mesh.tolist()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def _load_rank(path: Path) -> dict[str, Any]:
    # Unpickling a DeviceMesh outside its process group logs a warning per mesh; it is expected here.
    mesh_logger = logging.getLogger("torch.distributed.device_mesh")
    level = mesh_logger.level
    mesh_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as exc:
        raise ExportError(
            "CorruptCheckpoint",
            f"Cannot read {path}: {type(exc).__name__}: {exc}.",
            "The file is truncated or not a torch.save state dict: re-copy it from the trainer's checkpoint volume.",
        ) from exc
    finally:
        mesh_logger.setLevel(level)
    if not isinstance(state, dict):
        raise ExportError(
            "CorruptCheckpoint",
            f"{path} holds a {type(state).__name__}, not a state dict.",
            "Pass a verl FSDP actor checkpoint (model_world_size_W_rank_R.pt files).",
        )
    return state


def _is_dtensor(value: object) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _storage_identity(value: torch.Tensor) -> tuple[object, ...]:
    local = value._local_tensor if _is_dtensor(value) else value
    placements = tuple(str(p) for p in value.placements) if _is_dtensor(value) else ()
    if local.untyped_storage().nbytes() == 0:
        return (id(value),)  # empty shards share no data; never treat them as aliases
    return (
        local.untyped_storage().data_ptr(),
        local.storage_offset(),
        tuple(local.shape),
        tuple(local.stride()),
        local.dtype,
        tuple(value.shape),
        placements,
    )


def _madvise(t: torch.Tensor, advice: int) -> int:
    """madvise over the bytes ``t`` spans (not its whole storage, which a view may share)."""
    if t.numel() == 0:
        return 0
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    ptr, size = t.data_ptr(), extent * t.element_size()
    start = ptr - ptr % _PAGE
    return int(_libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(ptr + size - start), advice))


def populate_pages(t: torch.Tensor) -> None:
    """Map a memory-mapped tensor's pages in one call before reading it.

    Touching a file mapping page by page takes one fault per 64 KB; on the 1.5B benchmark that was
    5x the cost of the merge itself. MADV_POPULATE_READ (Linux 5.14+) maps the range in one
    syscall; older kernels get MADV_WILLNEED (read-ahead only).
    """
    if _madvise(t, _MADV_POPULATE_READ) != 0:
        _madvise(t, _MADV_WILLNEED)


def release_pages(t: torch.Tensor) -> None:
    """Drop this tensor's file-mapped pages from our RSS. Only for tensors from mmap'd files."""
    _madvise(t, _MADV_DONTNEED)


class Source:
    """The opened checkpoint: memory-mapped rank state dicts plus the per-tensor plan."""

    def __init__(self, layout: CheckpointLayout) -> None:
        self.layout = layout
        self.states: list[dict[str, Any]] = [_load_rank(p) for p in layout.rank_files]
        self.plans, self.aliases = self._plan()

    def adopt_declared_ties(self, tied: dict[str, str]) -> list[str]:
        """Store once the weights the model config declares tied (alias -> canonical name).

        FSDP1's sharded state dict clones every shard, so a tied lm_head arrives as its own
        storage and the storage check in ``_plan`` cannot see the tie. Dropping it is only right if
        the values really are equal, so both are merged and compared; pairs that differ stay
        separate. Returns the aliases adopted.
        """
        by_key = {p.key: p for p in self.plans}
        adopted: list[str] = []
        for alias, canonical in tied.items():
            a, c = by_key.get(alias), by_key.get(canonical)
            if a is None or c is None or a.shape != c.shape or a.dtype != c.dtype:
                continue
            if torch.equal(self.merged(a, a.dtype), self.merged(c, c.dtype)):
                self.aliases[alias] = canonical
                adopted.append(alias)
        self.plans = [p for p in self.plans if p.key not in adopted]
        return adopted

    def _plan(self) -> tuple[list[TensorPlan], dict[str, str]]:
        world = self.layout.world_size
        rank0 = self.states[0]
        keys = list(rank0)
        for rank, state in enumerate(self.states[1:], start=1):
            if set(state) != set(keys):
                diff = sorted(set(state) ^ set(keys))[:5]
                raise ExportError(
                    "CorruptCheckpoint",
                    f"Rank {rank} and rank 0 hold different parameter names (e.g. {diff}).",
                    "The rank files come from different saves: re-copy the whole global_step directory.",
                )
        if any("lora_" in k for k in keys) and not any(k.endswith("embed_tokens.weight") for k in keys):
            raise ExportError(
                "UnsupportedCheckpoint",
                "This is a LoRA-only checkpoint (adapter weights only).",
                "Export the adapter with PEFT, or save full weights (checkpoint.save_lora_only=false).",
            )
        # A weight tied under two names (lm_head <-> embed_tokens) is two DTensor objects in an FSDP2
        # state dict, but torch.save stores their one storage once: same storage, offset, shape and
        # stride means the same parameter. The first name is canonical; later names are aliases that
        # transformers re-ties on load (and transformers>=5 refuses to re-tie if both are stored).
        seen: dict[tuple[object, ...], str] = {}
        aliases: dict[str, str] = {}
        plans: list[TensorPlan] = []
        for key in keys:
            value = rank0[key]
            if not isinstance(value, torch.Tensor):
                raise ExportError(
                    "UnsupportedCheckpoint",
                    f"Entry {key!r} is a {type(value).__name__}, not a tensor.",
                    "Pass a model state dict checkpoint (FSDP1 with a device mesh, or FSDP2).",
                )
            identity = _storage_identity(value)
            if identity in seen:
                aliases[key] = seen[identity]
                continue
            seen[identity] = key
            plans.append(self._plan_one(key, value, world))
        return plans, aliases

    @staticmethod
    def _plan_one(key: str, value: torch.Tensor, world: int) -> TensorPlan:
        if type(value).__name__ == "ShardedTensor":
            raise ExportError(
                "UnsupportedCheckpoint",
                f"{key!r} is a ShardedTensor (FSDP1 SHARDED_STATE_DICT without a device mesh).",
                "verl passes a device mesh to FSDP so it saves DTensors; re-save with a device mesh.",
            )
        if not _is_dtensor(value):
            return TensorPlan(key, tuple(value.shape), value.dtype, None, None)
        mesh = value.device_mesh.mesh.tolist()
        ranks = sorted(mesh_ranks(mesh))
        if ranks != list(range(world)):
            raise ExportError(
                "WorldSizeMismatch",
                f"{key!r} is sharded over a device mesh of ranks "
                f"{ranks[:8]}{'...' if len(ranks) > 8 else ''} "
                f"({len(ranks)} ranks) but the checkpoint has {world} rank files.",
                "Export the directory that holds every rank of that mesh, with its own fsdp_config.json.",
            )
        specs = tuple(spec_from_placement(key, p) for p in value.placements)
        for spec in specs:
            if spec.dim is not None and not 0 <= spec.dim < value.dim():
                raise ExportError(
                    "CorruptCheckpoint",
                    f"{key!r} is sharded on dim {spec.dim} of a {value.dim()}-d tensor.",
                    "Re-save the checkpoint.",
                )
        return TensorPlan(key, tuple(value.shape), value.dtype, specs, mesh)

    def merged(self, plan: TensorPlan, out_dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
        """The full tensor for ``plan`` in ``out_dtype`` (written into ``out`` when given, which saves
        an allocation and its first-touch page faults per tensor); source pages are released afterwards."""
        if out is None:
            out = torch.empty(plan.shape, dtype=out_dtype)
        if out.dtype != out_dtype or tuple(out.shape) != plan.shape:
            raise ValueError(f"{plan.key}: output buffer is {out.dtype} {tuple(out.shape)}")
        if plan.specs is None:
            return self._merge_plain(plan, out)
        mesh_shape = mesh_shape_of(plan.mesh)
        covered = 0
        for rank, coord in owners(plan.mesh, plan.specs):
            value = self.states[rank][plan.key]
            if not _is_dtensor(value) or tuple(value.placements) != tuple(self._placements(plan.key)):
                raise ExportError(
                    "CorruptCheckpoint",
                    f"{plan.key!r} has a different placement on rank {rank} than on rank 0.",
                    "The rank files come from different saves: re-copy the step directory.",
                )
            local = value._local_tensor
            box = local_box(plan.shape, mesh_shape, coord, plan.specs)
            if tuple(local.shape) != box.lengths:
                raise ExportError(
                    "CorruptCheckpoint",
                    f"{plan.key!r} on rank {rank} has local shape {tuple(local.shape)}, but its placement "
                    f"{self._placements(plan.key)} on a mesh of shape {mesh_shape} implies {box.lengths}.",
                    "The checkpoint does not follow DTensor's chunking; re-save it with FSDP/FSDP2.",
                )
            populate_pages(local)
            out[box.slices()].copy_(local)
            covered += box.numel
            release_pages(local)
        if covered != plan.numel:
            raise ExportError(
                "CorruptCheckpoint",
                f"{plan.key!r}: shards cover {covered} of {plan.numel} elements.",
                "Re-save the checkpoint.",
            )
        return out

    def _placements(self, key: str) -> tuple[Any, ...]:
        return tuple(self.states[0][key].placements)

    def _merge_plain(self, plan: TensorPlan, out: torch.Tensor) -> torch.Tensor:
        first = self.states[0][plan.key]
        for rank in range(1, self.layout.world_size):
            other = self.states[rank][plan.key]
            # A plain entry must be a full replica; verl's merger checks the same thing.
            if _is_dtensor(other) or other.shape != first.shape or not torch.equal(other, first):
                raise ExportError(
                    "CorruptCheckpoint",
                    f"Plain (non-DTensor) entry {plan.key!r} differs between rank 0 and rank {rank}; a plain "
                    "entry must be the same full tensor on every rank.",
                    "The rank files come from different saves, or the model was saved without FSDP wrapping "
                    "consistently: re-save the checkpoint.",
                )
            release_pages(other)
        populate_pages(first)
        out.copy_(first)
        release_pages(first)
        return out
