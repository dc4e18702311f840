"""Where each rank's local tensor sits inside the full tensor: pure arithmetic on placements.

A DTensor is described by its global shape, a device mesh (an n-d array of global ranks) and
one placement per mesh dimension. ``Shard(d)`` on mesh dim ``i`` splits tensor dim ``d`` into
``mesh.shape[i]`` chunks the way ``torch.chunk`` does (ceil-sized chunks, trailing ones may be
short or empty), applied left to right over the mesh dims; ``Replicate`` leaves it whole.
Anything else (``Partial`` sums, ``_StridedShard`` from FSDP+TP) cannot be merged by slicing,
so it is refused rather than guessed: the article's converter guessed "cat on dim 0" and
produced wrong weights for replicated and non-dim-0 shards.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_trainer.export.errors import ExportError


@dataclass(frozen=True)
class ShardSpec:
    """A placement reduced to what slicing needs: ``dim`` is None for Replicate."""

    dim: int | None


@dataclass(frozen=True)
class Box:
    """A rectangular region of the global tensor: per-dim offset and length."""

    offsets: tuple[int, ...]
    lengths: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for length in self.lengths:
            n *= length
        return n

    def slices(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.offsets, self.lengths, strict=True))


def spec_from_placement(key: str, placement: object) -> ShardSpec:
    """Translate a torch placement object; refuse the kinds that are not a plain slice."""
    from torch.distributed.tensor import Replicate, Shard

    # Exact type checks on purpose: subclasses/relatives of Shard (``_StridedShard``) interleave
    # rows and would be silently mis-merged by plain slicing.
    if type(placement) is Replicate:
        return ShardSpec(dim=None)
    if type(placement) is Shard:
        return ShardSpec(dim=int(placement.dim))
    raise ExportError(
        "UnsupportedPlacement",
        f"Parameter {key!r} has placement {placement!r}; only Shard(dim) and Replicate can be merged "
        "by slicing (Partial needs a reduction, _StridedShard comes from FSDP combined with tensor "
        "parallelism).",
        "Save the checkpoint with plain FSDP/HSDP (verl actor strategy fsdp or fsdp2 without TP), "
        "or merge it with a tool that understands this placement.",
    )


def chunk_range(length: int, num_chunks: int, index: int) -> tuple[int, int]:
    """(offset, size) of chunk ``index`` when ``length`` is split like ``torch.chunk``.

    torch.chunk uses ceil-sized chunks, so trailing chunks may be shorter or empty; DTensor's
    ``Shard`` follows the same rule (``Shard.local_shard_size_and_offset``).
    """
    full = -(-length // num_chunks)
    start = min(full * index, length)
    return start, min(full, length - start)


def local_box(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    coord: tuple[int, ...],
    specs: tuple[ShardSpec, ...],
) -> Box:
    """The region of the global tensor held by the rank at mesh coordinate ``coord``."""
    offsets = [0] * len(global_shape)
    lengths = list(global_shape)
    for mesh_dim, spec in enumerate(specs):
        if spec.dim is None:
            continue
        d = spec.dim
        start, size = chunk_range(lengths[d], mesh_shape[mesh_dim], coord[mesh_dim])
        offsets[d] += start
        lengths[d] = size
    return Box(tuple(offsets), tuple(lengths))


def owners(mesh: list[list[int]] | list[int], specs: tuple[ShardSpec, ...]) -> list[tuple[int, tuple[int, ...]]]:
    """The ranks whose local tensors together cover the global tensor exactly once.

    Along a Replicate mesh dim every coordinate holds the same data, so only coordinate 0 is
    read: that is what keeps HSDP merges from reading (and summing memory for) every replica.
    Returns (global rank, mesh coordinate) pairs.
    """
    import itertools

    shape = mesh_shape_of(mesh)
    result: list[tuple[int, tuple[int, ...]]] = []
    ranges = [range(1) if spec.dim is None else range(n) for n, spec in zip(shape, specs, strict=True)]
    for coord in itertools.product(*ranges):
        node: object = mesh
        for c in coord:
            node = node[c]  # type: ignore[index]
        result.append((int(node), tuple(coord)))  # type: ignore[call-overload]
    return result


def mesh_shape_of(mesh: list[list[int]] | list[int] | int) -> tuple[int, ...]:
    shape: list[int] = []
    node: object = mesh
    while isinstance(node, list):
        shape.append(len(node))
        node = node[0] if node else None
    return tuple(shape)


def mesh_ranks(mesh: list[list[int]] | list[int] | int) -> list[int]:
    if isinstance(mesh, list):
        return [r for sub in mesh for r in mesh_ranks(sub)]
    return [int(mesh)]
