"""Write a verl FSDP checkpoint with real torch.distributed: gloo on CPU, one process per rank.

Each rank builds the same Qwen2 model, wraps it with FSDP2 ``fully_shard`` the way verl's
``apply_fsdp2`` does (per decoder layer, then the root) or, with ``fsdp_version=1``, with
``FullyShardedDataParallel`` and a device mesh like verl's default ``fsdp`` strategy (which then
saves a SHARDED_STATE_DICT), and saves through verl 0.9.1's own
``FSDPCheckpointManager.save_checkpoint``, so the files are exactly what a training run leaves:
``model_world_size_W_rank_R.pt`` (torch.save of the DTensor state dict), ``fsdp_config.json`` and
``huggingface/``. Knobs the converter must honour:

- ``shard_dim1``: parameter name suffixes FSDP2 shards on dim 1 instead of 0 (``shard_placement_fn``);
- ``hsdp``: a 2-d ("ddp", "fsdp") mesh, so every DTensor is (Replicate(), Shard(d));
- ``ignored``: parameter name suffixes left out of FSDP: they are saved as plain full tensors.

``materialize="full"`` initialises real random weights and (rank 0) also saves the unsharded
state dict as ``reference.pt`` for the tests; ``"meta"`` builds on the meta device and fills only
each rank's local shard (deterministic per name and rank), which is how the benchmark writes a
1.5B/7B checkpoint without holding the whole model in any process.

Run directly: ``python fsdp_writer.py SPEC_JSON`` (used by the tests and by bench/export).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class WriterSpec:
    out_root: str
    world_size: int
    config: dict[str, object]
    step: int = 1
    shard_dim1: list[str] = field(default_factory=list)
    hsdp: bool = False
    ignored: list[str] = field(default_factory=list)
    materialize: str = "full"  # full | meta
    # gloo: all ranks at once, real collectives. fake: one rank at a time with torch's fake process
    # group (same world size, same DeviceMesh, same fully_shard/state_dict/save code; collectives are
    # no-ops, which do not touch the saved bytes). Lets a 7B shape be written without 8 ranks of RAM.
    backend: str = "gloo"
    # 2: fully_shard (verl strategy fsdp2). 1: FullyShardedDataParallel with a device mesh and
    # SHARDED_STATE_DICT, which is what verl's default strategy "fsdp" saves.
    fsdp_version: int = 2
    param_dtype: str = "float32"
    seed: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tiny_tokenizer(vocab_size: int):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, min(vocab_size, 64)):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _fill_local(model, seed: int, rank: int) -> None:  # type: ignore[no-untyped-def]
    import torch
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p._local_tensor if isinstance(p, DTensor) else p
            g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()) * 31 + rank)
            local.copy_(torch.randn(local.shape, generator=g, dtype=torch.float32).mul_(0.02))


def _wrap_fsdp1(model, mesh, hsdp: bool):  # type: ignore[no-untyped-def]
    """Wrap like verl's fsdp workers: one FSDP unit per decoder layer, orig params, a device mesh."""
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
    return FullyShardedDataParallel(
        model,
        auto_wrap_policy=policy,
        device_mesh=mesh,
        sharding_strategy=ShardingStrategy.HYBRID_SHARD if hsdp else ShardingStrategy.FULL_SHARD,
        use_orig_params=True,
        device_id=torch_cpu(),
    )


def torch_cpu():  # type: ignore[no-untyped-def]
    import torch

    return torch.device("cpu")


def _worker(rank: int, spec: WriterSpec, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(rank),
    )
    import torch
    import torch.distributed as dist
    from omegaconf import DictConfig
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    torch.set_num_threads(1)
    if spec.backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=spec.world_size)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=spec.world_size)
    dtype = getattr(torch, spec.param_dtype)
    # A real base model's config names its architecture; verl's merger needs it to pick the model class.
    config = Qwen2Config(**{"architectures": ["Qwen2ForCausalLM"], **spec.config})
    if spec.materialize == "full":
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config).to(dtype)
        with torch.no_grad():
            # Random everything (norms too): a mis-merged norm weight must change the logits.
            g = torch.Generator().manual_seed(spec.seed)
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if p.dim() == 1 else 0.0))
        if rank == 0:
            Path(spec.out_root).mkdir(parents=True, exist_ok=True)
            torch.save({k: v.clone() for k, v in model.state_dict().items()}, Path(spec.out_root) / "reference.pt")
    else:
        with torch.device("meta"):
            model = Qwen2ForCausalLM(config).to(dtype)

    if spec.hsdp:
        mesh = init_device_mesh("cpu", (2, spec.world_size // 2), mesh_dim_names=("ddp", "fsdp"))
    else:
        mesh = init_device_mesh("cpu", (spec.world_size,), mesh_dim_names=("fsdp",))
    names = {id(p): n for n, p in model.named_parameters()}
    ignored = {p for n, p in model.named_parameters() if any(n.endswith(s) for s in spec.ignored)}

    def placement(p: torch.nn.Parameter) -> Shard | None:
        return Shard(1) if any(names.get(id(p), "").endswith(s) for s in spec.shard_dim1) else None

    if spec.fsdp_version == 1:
        model = _wrap_fsdp1(model, mesh, spec.hsdp)
    else:
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, shard_placement_fn=placement, ignored_params=ignored or None)
        fully_shard(model, mesh=mesh, shard_placement_fn=placement, ignored_params=ignored or None)
    if spec.materialize == "meta":
        model.to_empty(device="cpu")
        _fill_local(model, spec.seed, rank)

    config.name_or_path = ""
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=None,
        lr_scheduler=None,
        processing_class=_tiny_tokenizer(config.vocab_size),
        checkpoint_config=DictConfig({"save_contents": ["model"], "load_contents": ["model"]}),
    )
    actor = Path(spec.out_root) / f"global_step_{spec.step}" / "actor"
    manager.save_checkpoint(local_path=str(actor), global_step=spec.step)
    if rank == 0:
        # verl's trainer (not the manager) writes the tracker after a complete save.
        (Path(spec.out_root) / "latest_checkpointed_iteration.txt").write_text(str(spec.step))
    dist.barrier()
    dist.destroy_process_group()


def write_checkpoint(spec: WriterSpec) -> Path:
    """Spawn ``world_size`` processes and write the checkpoint; returns the actor directory."""
    import torch.multiprocessing as mp

    if spec.backend == "fake":
        ctx = mp.get_context("spawn")
        for rank in range(spec.world_size):
            proc = ctx.Process(target=_worker, args=(rank, spec, 0))
            proc.start()
            proc.join()
            if proc.exitcode != 0:
                raise RuntimeError(f"rank {rank} of the fake-PG writer exited with {proc.exitcode}")
    else:
        mp.spawn(_worker, args=(spec, free_port()), nprocs=spec.world_size, join=True)
    return Path(spec.out_root) / f"global_step_{spec.step}" / "actor"


if __name__ == "__main__":
    print(write_checkpoint(WriterSpec(**json.loads(sys.argv[1]))))
