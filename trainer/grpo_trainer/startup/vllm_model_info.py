"""vLLM's model-class inspection, done on every GPU node while the TaskRunner starts instead of by the server.

Before a vLLM server can build its config it needs facts about the model's class (does it generate text,
support pipeline parallelism, ...). vLLM 0.24 learns them in a subprocess that imports vLLM and the model's
module again, so as not to initialise CUDA, and keeps the answer in `$VLLM_CACHE_ROOT/modelinfos` (keyed by
the model module's hash). A node that has not run vLLM yet, which is every new trainer pod, has no such file:
on the H200 machine's first run the server then spent 18.7 s between printing its arguments and building its
config, against 0.1 s on every later run (bench/gpu/RESULTS.md, session 2026-12-04 g), on the path to step 1.

grpo-train reads the model's architectures from its config.json and, as soon as Ray is up, runs one small
task on every node with a GPU that asks vLLM's registry to inspect them; vLLM writes its own cache file, so
the server's lookup later finds it. The task uses no CPU reservation and its process ends with it. Anything
it cannot do (a model path that is not a local directory, an architecture vLLM does not know, another
rollout than vLLM) leaves the inspection to the server, as before. GRPO_VLLM_MODEL_INFO_EARLY=0 turns it off,
and so does GRPO_WARM_START=0 (verl's own start-up order).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EARLY_ENV = "GRPO_VLLM_MODEL_INFO_EARLY"
READY_LINE = "grpo-train: vLLM model info ready"
NOT_READY_LINE = "grpo-train: vLLM model info not ready, left to the server"
SKIPPED_LINE = "grpo-train: vLLM model info left to the server: "


def architectures_of(model_config: Any) -> tuple[str, ...]:
    """Pure: the architectures a Hugging Face config.json names (what vLLM resolves the model class from);
    () for anything that is not a mapping with a list of them."""
    found = model_config.get("architectures") if isinstance(model_config, Mapping) else None
    if not isinstance(found, list | tuple):
        return ()
    return tuple(a for a in found if isinstance(a, str) and a)


def model_info_plan(config: Any) -> tuple[tuple[str, ...], str]:
    """The architectures to inspect early for a verl config, or () and why not."""
    rollout = config.actor_rollout_ref.rollout
    if str(rollout.name) != "vllm":
        return (), f"the rollout is {rollout.name}, not vllm"
    model_dir = Path(str(config.actor_rollout_ref.model.path))
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        return (), f"{config_file} is not a file here (a hub id, or a path only the workers see)"
    try:
        archs = architectures_of(json.loads(config_file.read_text()))
    except (OSError, ValueError) as e:
        return (), f"{config_file} cannot be read: {e}"
    if not archs:
        return (), f"{config_file} names no architectures"
    return archs, ""


def gpu_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pure: the ids of the alive Ray nodes (ray.nodes() entries) that offer a GPU."""
    return [n["NodeID"] for n in nodes if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]


def inspect_architectures(architectures: Sequence[str]) -> dict[str, str]:
    """In a process of its own on the node: vLLM's registry inspects each architecture, through its cache
    (a hit costs a file read, a miss runs vLLM's subprocess and writes the file). Architecture -> outcome."""
    started = time.monotonic()
    # Ray hides the GPUs from a task that asks for none (CUDA_VISIBLE_DEVICES=""), and vLLM reads an empty
    # value as "no GPU support"; the server sees its GPUs, and the inspection starts no CUDA either way
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        del os.environ["CUDA_VISIBLE_DEVICES"]
    try:
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.plugins import load_general_plugins

        load_general_plugins()  # as the server does first: a plugin may register or replace architectures
    except Exception as e:  # a node without vLLM, or another vLLM: the servers say what is wrong
        print(f"{SKIPPED_LINE}{e!r}", flush=True)
        return {}

    outcomes: dict[str, str] = {}
    for arch in architectures:
        model = ModelRegistry.models.get(arch)
        if model is None:
            outcomes[arch] = "not in vLLM's registry"
            continue
        try:
            model.inspect_model_cls()
            outcomes[arch] = "ready"
        except Exception as e:  # the server inspects it again, and reports the error where it matters
            outcomes[arch] = f"failed: {e!r}"
    line = READY_LINE if "ready" in outcomes.values() else NOT_READY_LINE
    print(f"{line} in {time.monotonic() - started:.1f} s: {outcomes}", flush=True)
    return outcomes


def start_model_info(config: Any, environ: Mapping[str, str]) -> list[Any]:
    """Starts the inspection on every GPU node, without waiting; returns the tasks' refs ([] when skipped).
    Never raises: whatever goes wrong here, the servers inspect the model themselves."""
    if environ.get(EARLY_ENV, "1") == "0":
        print(f"{SKIPPED_LINE}{EARLY_ENV}=0", flush=True)
        return []
    try:
        archs, why_not = model_info_plan(config)
        if not archs:
            print(SKIPPED_LINE + why_not, flush=True)
            return []
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = gpu_nodes(ray.nodes())
        # max_calls=1: the process imported vLLM; it ends with the task instead of idling in the pool.
        # max_retries=0: a worker that died is not worth a second import of vLLM on that node
        task = ray.remote(max_calls=1, max_retries=0)(inspect_architectures)
        return [
            task.options(
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(list(archs))
            for node in nodes
        ]
    except Exception as e:
        print(f"{SKIPPED_LINE}{e!r}", flush=True)
        return []
