"""Write safetensors shards tensor by tensor.

``safetensors.torch.save_file`` needs a whole shard in memory. The format is simple (8-byte
little-endian header length, JSON header with dtype/shape/byte offsets, then raw bytes), and every
shape and dtype is known from the checkpoint's metadata before any data is read, so each shard's
header is written first and tensors are appended as they are merged: peak memory is one tensor.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch

_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def parse_size(text: str) -> int:
    """'10GB' -> 10**10 (decimal units like transformers' max_shard_size; GiB is binary)."""
    m = _SIZE.match(text)
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 500MB, 10GB, 4GiB)")
    return int(float(m.group(1)) * _UNITS[unit])


def dtype_code(dtype: torch.dtype) -> str:
    if dtype not in _DTYPES:
        raise ValueError(f"safetensors cannot store {dtype}")
    return _DTYPES[dtype]


def nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    n = 1
    for s in shape:
        n *= s
    return n * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Entry:
    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return nbytes(self.shape, self.dtype)


@dataclass
class ShardPlan:
    filename: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def data_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def header(self, metadata: dict[str, str]) -> bytes:
        offset = 0
        doc: dict[str, object] = {"__metadata__": metadata}
        for e in self.entries:
            doc[e.key] = {
                "dtype": dtype_code(e.dtype),
                "shape": list(e.shape),
                "data_offsets": [offset, offset + e.nbytes],
            }
            offset += e.nbytes
        raw = json.dumps(doc, separators=(",", ":")).encode()
        # The data section must start 8-byte aligned; safetensors pads the header with spaces.
        raw += b" " * (-len(raw) % 8)
        return struct.pack("<Q", len(raw)) + raw

    def file_bytes(self, metadata: dict[str, str]) -> int:
        return len(self.header(metadata)) + self.data_bytes


def plan_shards(entries: list[Entry], max_shard_bytes: int) -> list[ShardPlan]:
    """Greedy, in order (keeps a layer's tensors together); an oversized tensor gets its own shard."""
    groups: list[list[Entry]] = [[]]
    size = 0
    for e in entries:
        if groups[-1] and size + e.nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(e)
        size += e.nbytes
    n = len(groups)
    return [ShardPlan(f"model-{i + 1:05d}-of-{n:05d}.safetensors", g) for i, g in enumerate(groups)]


def index_json(shards: list[ShardPlan], metadata: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"total_size": sum(s.data_bytes for s in shards), **metadata},
        "weight_map": {e.key: s.filename for s in shards for e in s.entries},
    }


class ShardWriter:
    """Appends tensors to the planned shard files in plan order; checks every byte count."""

    def __init__(self, directory: Path, shards: list[ShardPlan], metadata: dict[str, str]) -> None:
        self._dir = directory
        self._shards = shards
        self._metadata = metadata
        self._shard_of = {e.key: i for i, s in enumerate(shards) for e in s.entries}
        self._expected = [(e, i) for i, s in enumerate(shards) for e in s.entries]
        self._pos = 0
        self._file: BinaryIO | None = None
        self._open_index = -1

    def write(self, key: str, tensor: torch.Tensor) -> None:
        entry, shard = self._expected[self._pos]
        if entry.key != key or tuple(tensor.shape) != entry.shape or tensor.dtype != entry.dtype:
            raise RuntimeError(
                f"writer expected {entry} next, got {key} {tuple(tensor.shape)} {tensor.dtype}"
            )
        if shard != self._open_index:
            self._close()
            self._file = open(self._dir / self._shards[shard].filename, "wb")  # noqa: SIM115
            self._file.write(self._shards[shard].header(self._metadata))
            self._open_index = shard
        assert self._file is not None
        if tensor.numel():
            flat = tensor.contiguous().reshape(-1).view(torch.uint8)
            self._file.write(memoryview(flat.numpy()))
        self._pos += 1

    def _close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def finish(self) -> None:
        self._close()
        if self._pos != len(self._expected):
            raise RuntimeError(f"writer got {self._pos} of {len(self._expected)} planned tensors")
        for s in self._shards:
            expected = s.file_bytes(self._metadata)
            actual = (self._dir / s.filename).stat().st_size
            if actual != expected:
                raise RuntimeError(f"{s.filename}: wrote {actual} bytes, planned {expected}")
