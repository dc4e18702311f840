"""vLLM's single-process executor (`uni`) for rollout servers of one GPU: one process spawn fewer at start-up.

verl 0.9.1 starts every vLLM server with `distributed_executor_backend="mp"` (vllm_async_server.py,
`launch_server`), then lets `rollout.engine_kwargs.vllm` override any of those arguments. With "mp"
vLLM's EngineCore process spawns one more process for the GPU worker even when there is one GPU
(MultiprocExecutor); with "uni" (UniProcExecutor, vLLM's own default for a world size of 1) the worker
runs inside the EngineCore process. Each of those processes imports torch and vLLM before it does
anything: 15-18 s apiece on the H200 machine (bench/gpu/RESULTS.md, issue 17.3).

Why the rest of verl works unchanged with "uni", for a server of one GPU (TP = PP = DP = EP = 1):
- verl's worker extension (vLLMColocateWorkerExtension) is mixed into vLLM's Worker whichever executor
  creates it; its collective_rpc calls (update_weights_from_ipc, monkey_patch_model) reach the same
  methods through UniProcExecutor.collective_rpc;
- the weight-sync socket is named from the worker's local rank: 0 with either executor for one GPU,
  as the trainer side computes it (vllm_rollout.py, `rollout_rank % local_world_size`);
- sleep and wake_up go through Executor.sleep/wake_up to the same Worker methods; the CUDA memory
  vLLM frees and restores is the one process's either way.
Anything else (more GPUs per server, prefill/decode disaggregation, a checkpoint engine other than
verl's "naive" IPC path, or an executor the user chose) keeps verl's "mp".

GRPO_VLLM_UNI=0 in the trainer's environment keeps verl's "mp" everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UNI_ENV = "GRPO_VLLM_UNI"
UNI = "uni"
BACKEND_KEY = "distributed_executor_backend"
# the verl sections that start vLLM servers at start-up, and the switch (if any) that enables each
ROLLOUT_SECTIONS: tuple[tuple[str, str | None], ...] = (
    ("actor_rollout_ref.rollout", None),
    ("reward.reward_model.rollout", "reward.reward_model.enable"),
)
_ONE_GPU_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "data_parallel_size",
    "expert_parallel_size",
)
# engine_kwargs that reshape the server's GPUs behind verl's back (verl passes them to vLLM verbatim)
_ENGINE_TOPOLOGY_KEYS = (BACKEND_KEY, "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


@dataclass(frozen=True)
class ExecutorChoice:
    section: str  # e.g. actor_rollout_ref.rollout
    backend: str | None  # "uni", or None: verl's own ("mp", or what the user set)
    reason: str

    @property
    def key(self) -> str:
        return f"{self.section}.engine_kwargs.vllm.{BACKEND_KEY}"


def uni_blocker(rollout: Mapping[str, Any]) -> str | None:
    """Pure: why this rollout section must keep verl's executor; None when "uni" serves it the same."""
    if rollout.get("name") != "vllm":
        return f"rollout engine {rollout.get('name')!r}, not vllm"
    for key in _ONE_GPU_KEYS:
        if int(rollout.get(key) or 1) != 1:
            return f"{key}={rollout.get(key)}: more than one GPU per server"
    if (rollout.get("disaggregation") or {}).get("enabled"):
        return "prefill/decode disaggregation"
    backend = (rollout.get("checkpoint_engine") or {}).get("backend") or "naive"
    if backend != "naive":
        return f"checkpoint_engine.backend={backend}: only verl's naive IPC weight sync is known to work"
    vllm_kwargs = (rollout.get("engine_kwargs") or {}).get("vllm") or {}
    set_by_user = [k for k in _ENGINE_TOPOLOGY_KEYS if vllm_kwargs.get(k) is not None]
    if set_by_user:
        return f"engine_kwargs.vllm.{set_by_user[0]} set in the config"
    return None


def choose_executor(section: str, rollout: Mapping[str, Any], environ: Mapping[str, str]) -> ExecutorChoice:
    """Pure: the executor our config sets for one rollout section."""
    if environ.get(UNI_ENV, "1") == "0":
        return ExecutorChoice(section, None, f"{UNI_ENV}=0")
    blocker = uni_blocker(rollout)
    if blocker is not None:
        return ExecutorChoice(section, None, blocker)
    return ExecutorChoice(section, UNI, "one GPU per server: the worker runs in vLLM's EngineCore process")


def executor_choices(config: Mapping[str, Any], environ: Mapping[str, str]) -> list[ExecutorChoice]:
    """Pure: a choice for every rollout section of a plain (resolved) verl config that starts vLLM servers."""
    choices = []
    for section, enabled_by in ROLLOUT_SECTIONS:
        if enabled_by is not None and not select_plain(config, enabled_by):
            continue
        rollout = select_plain(config, section)
        if isinstance(rollout, Mapping):
            choices.append(choose_executor(section, rollout, environ))
    return choices


def select_plain(config: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """Pure: a dotted key of a plain (resolved) verl config; `default` where it is missing or null."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or node.get(part) is None:
            return default
        node = node[part]
    return node
