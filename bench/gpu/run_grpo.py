"""GPU runs of grpo-train (and of stock `python -m verl.trainer.main_ppo` beside it) on one GPU.

    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run ours --export   # grpo-train, checkpoint, export, generate
    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run stock            # verl's main_ppo, same model/data/keys
    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run ours --lr 1e-3 --reward token --steps 30
    python bench/gpu/run_grpo.py report OURS STOCK          # step-time ratio and phase timers (result JSONs or logs)
    python bench/gpu/run_grpo.py pairs O1 S1 O2 S2 ...      # the ratio by the mean of pairs (ABBA)
    python bench/gpu/run_grpo.py startup LOG...             # start-up breakdown of timed logs (bench/gpu/startup.py)

Needs one NVIDIA GPU and the trainer image's stack (verl 0.9.1, vLLM 0.24.0, Ray). Everything else is built
here: a tiny random Qwen2 model with a locally trained byte-level BPE tokenizer (and, for `--reward model`, a
tiny random Qwen2 sequence classifier as reward model), a JSONL prompt set (converted to parquet by
grpo_trainer's data prep), colocated on 1 GPU with TP 1. bench/gpu/session.py runs the device session's
batch through `run` and `run_together`.

A run is a RunSpec: learning rate, reward (length, the target-word share of bench/gpu/token_reward.py, or
the reward model), sampling temperature, steps, and whether it shares the GPU with other runs. Stock and
ours get the same verl keys plus the values grpo-train derives (parquet files, max_model_len, the length
reward manager, validation off), read from grpo-train's own config builder; stock runs without our worker
hook and tracking backend. Every line of a run's log carries the seconds since its process started (the
start-up breakdown); step times come from verl's console logger, and an ours run also writes every step's
whole metrics dict to steps/<run>.jsonl (grpo.metrics.stepsFile). Step 1 (warm-up) is left out of medians.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import iosample
import startup
import steplog
import tiny_model
from pairs import pairs_ratio

ENV = {
    "PYTHONUNBUFFERED": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # no flashinfer-cubin in the offline wheelhouse
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "HYDRA_FULL_ERROR": "1",
    "HF_HUB_OFFLINE": "1",  # everything is local; never reach for the hub
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "RAY_AUTH_MODE": "disabled",  # as the clusters of bench/gpu/raycluster.py run
}
PROMPTS_PER_STEP = 16
SAMPLES_PER_PROMPT = 4
# Keys grpo-train derives from its `grpo:` mapping; stock main_ppo gets them explicitly.
DERIVED_KEYS = (
    "data.train_files",
    "data.val_files",
    "actor_rollout_ref.rollout.max_model_len",
    "reward.reward_manager.source",
    "reward.reward_manager.name",
    "reward.reward_manager.module.path",
    "trainer.val_before_train",
    "trainer.test_freq",
)
HERE = Path(__file__).resolve().parent
TOKEN_REWARD = HERE / "token_reward.py"
# A run that shares the GPU with other runs gets a fixed KV cache and a small memory floor: vLLM then
# skips its memory profiling, whose check fails when another process frees GPU memory meanwhile.
SHARED_GPU_UTILIZATION = 0.04
SHARED_KV_CACHE_BYTES = 512 * 2**20
SHARED_OBJECT_STORE_BYTES = 2 * 2**30
SHARED_PROCESSES = 2
MIN_TIMED_STEPS = 3  # step 1 (start-up) and at least two timed steps
# Environment of every Ray worker of a reward-model run (through the job's runtime_env, which joins a running
# cluster too, and wins over verl's VLLM_LOGGING_LEVEL=WARN): diagnostics only, what is computed is unchanged.
MODEL_REWARD_WORKER_ENV = {"VLLM_LOGGING_LEVEL": "INFO", "VERL_LOGGING_LEVEL": "INFO"}


@dataclass(frozen=True)
class RunSpec:
    """One training run of the GPU bench: what differs between runs, everything else is shared."""

    name: str  # file names: logs/<name>.log, <name>.json, steps/<name>.jsonl, checkpoints-<name>
    kind: str = "ours"  # ours: grpo-train; stock: python -m verl.trainer.main_ppo with the same keys
    steps: int = 11
    lr: float = 1e-5
    reward: str = "length"  # length | token (bench/gpu/token_reward.py) | model (a tiny reward model)
    temperature: float | None = None  # rollout sampling temperature; None: verl's default (1.0)
    shared_gpu: bool = False  # may run beside other runs on the one GPU (small fixed vLLM memory)
    ray_address: str | None = None  # join this Ray cluster; None: the run starts a private local one
    metrics_port: int = 9400
    role_resources: tuple[tuple[str, str], ...] = ()  # (role, Ray resource) pairs: pins pools to nodes
    export: bool = False  # grpo-export --verify and a generation with the exported model afterwards
    timeout_s: float = 540  # the run is killed after this many seconds
    # a timed run asks for more steps than it can reach and is stopped at timeout_s on purpose: the
    # steps it reached are its sample (RunResult.ok then needs MIN_TIMED_STEPS, not every step)
    wall_capped: bool = False
    # more verl keys (`--set KEY=VALUE`), after the shared ones: a start-up or engine variant of one run
    extra_keys: tuple[tuple[str, Any], ...] = ()
    # more environment of the run's process (e.g. GRPO_GUARDRAILS, GRPO_ROLLBACK), after the bench's
    env: tuple[tuple[str, str], ...] = ()
    save_freq: int | None = None  # trainer.save_freq; None: only the last step
    # start from a copy of this run's checkpoint directory (a rolled-back attempt of that run)
    resume_from: str | None = None
    # extra_keys are the whole training config (bench/gpu/throughput.py: the operator's render, verl's example):
    # only the run's environment (paths, steps, names, logger, GPUs) is added, none of the shared settings
    keys_only: bool = False
    # stock only: its Ray workers get grpo-train's chunked log-probabilities (grpo_trainer/token_logprobs.py), so
    # that an ours/stock pair compares our other overheads, not verl's per-token loop against our fix of it
    logprobs_fix: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("ours", "stock"):
            raise ValueError(f"kind must be ours or stock, got {self.kind!r}")
        if self.reward not in ("length", "token", "model"):
            raise ValueError(f"reward must be length, token or model, got {self.reward!r}")
        if self.kind == "stock" and (self.reward != "length" or self.role_resources or self.export):
            raise ValueError("a stock run is the length-reward baseline: no other reward, pinning or export")
        if self.logprobs_fix and self.kind != "stock":
            raise ValueError("logprobs_fix is for stock runs: grpo-train always installs it")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"run name {self.name!r}: letters, digits, '.', '_' and '-' only")


@dataclass(frozen=True)
class Paths:
    work: Path

    @property
    def model(self) -> Path:
        return self.work / "model"

    @property
    def reward_model(self) -> Path:
        return self.work / "reward-model"

    @property
    def prompts(self) -> Path:
        return self.work / "prompts" / "train.jsonl"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    @property
    def export(self) -> Path:
        return self.work / "export"

    def prepared(self, run: str) -> Path:
        return self.work / f"prepared-{run}"

    def config(self, run: str) -> Path:
        return self.work / f"verl-{run}.yaml"

    def log(self, run: str) -> Path:
        return self.logs / f"{run}.log"

    def steps_file(self, run: str) -> Path:
        return self.work / "steps" / f"{run}.jsonl"

    def checkpoints(self, run: str) -> Path:
        return self.work / f"checkpoints-{run}"


def reward_keys(spec: RunSpec, paths: Paths) -> dict[str, Any]:
    """verl keys of the run's reward (the length reward's manager keys are grpo-train's to fill in)."""
    if spec.reward == "token":
        return {
            "reward.custom_reward_function.path": str(TOKEN_REWARD),
            "reward.custom_reward_function.name": "compute_score",
        }
    if spec.reward == "model":
        return {
            "reward.reward_model.enable": True,
            "reward.reward_model.model_path": str(paths.reward_model),
            # its own pool of one GPU (the reward node's), as the operator renders a reward group
            "reward.reward_model.enable_resource_pool": True,
            "reward.reward_model.n_gpus_per_node": 1,
            "reward.reward_model.nnodes": 1,
            "reward.reward_model.rollout.name": "vllm",
            "reward.reward_model.rollout.tensor_model_parallel_size": 1,
            "reward.reward_model.rollout.gpu_memory_utilization": SHARED_GPU_UTILIZATION,
            "+reward.reward_model.rollout.engine_kwargs.vllm.kv_cache_memory_bytes": SHARED_KV_CACHE_BYTES,
            # keep the reward server awake: verl 0.9.1 puts it to sleep when it starts (free_cache_engine,
            # reward_model.py:48) and, with its own pool, never wakes it (only compute_rm_score does, which
            # the agent-loop reward path skips); vLLM 0.24 queues the requests of a sleeping engine
            # unscheduled, and verl's reward client and router wait without a timeout: step 1 never ends
            "reward.reward_model.rollout.free_cache_engine": False,
            # vLLM's and verl's INFO lines (reward server port, sleep/wake, router address) in the run's log
            **{f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}": v for k, v in MODEL_REWARD_WORKER_ENV.items()},
        }
    return {}


def environment_keys(spec: RunSpec, paths: Paths) -> dict[str, Any]:
    """Where the run reads and writes, how long it runs and on which GPUs: the same for every config."""
    return {
        "actor_rollout_ref.model.path": str(paths.model),
        "data.dataloader_num_workers": 0,
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": spec.steps,
        "trainer.save_freq": spec.save_freq or spec.steps,
        "trainer.default_local_dir": str(paths.checkpoints(spec.name)),
        "trainer.project_name": "grpo-gpu-smoke",
        "trainer.experiment_name": spec.name,
        "trainer.logger": ["console"],
    }


def verl_keys(spec: RunSpec, paths: Paths) -> dict[str, Any]:
    """The run's verl keys: the shared settings known to work on one H200 (issue 8) and the spec's changes."""
    if spec.keys_only:
        return {**dict(spec.extra_keys), **environment_keys(spec, paths), **reward_keys(spec, paths)}
    keys: dict[str, Any] = {
        **environment_keys(spec, paths),
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "data.train_batch_size": PROMPTS_PER_STEP,
        "data.max_prompt_length": 64,
        "data.max_response_length": 64,
        "actor_rollout_ref.model.use_remove_padding": False,  # no flash-attn in the image
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.actor.use_torch_compile": False,
        "actor_rollout_ref.actor.optim.lr": spec.lr,
        "actor_rollout_ref.actor.ppo_mini_batch_size": PROMPTS_PER_STEP,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.001,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": SAMPLES_PER_PROMPT,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.gpu_memory_utilization": 0.3,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
        "reward.num_workers": 1,
        **reward_keys(spec, paths),
    }
    if spec.temperature is not None:
        keys["actor_rollout_ref.rollout.temperature"] = spec.temperature
    if spec.shared_gpu:
        keys["actor_rollout_ref.rollout.gpu_memory_utilization"] = SHARED_GPU_UTILIZATION
        keys["+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"] = SHARED_KV_CACHE_BYTES
        # fewer processes per run when several runs share the machine's 16 cores (verl: 8 and 8, each a
        # process importing torch; TransferQueue's own default is 2 units): what a run computes is unchanged
        keys["actor_rollout_ref.rollout.agent.num_workers"] = SHARED_PROCESSES
        keys["transfer_queue.backend.SimpleStorage.num_data_storage_units"] = SHARED_PROCESSES
        if spec.ray_address is None:  # a private cluster beside others: no dashboard port to fight over
            keys["+ray_kwargs.ray_init.include_dashboard"] = False
            keys["+ray_kwargs.ray_init.object_store_memory"] = SHARED_OBJECT_STORE_BYTES
    keys.update(spec.extra_keys)
    return keys


def grpo_section(spec: RunSpec, paths: Paths) -> dict[str, Any]:
    return {
        "maxModelLenFactor": 1.2,
        "reward": {"type": {"token": "function"}.get(spec.reward, spec.reward)},
        "placement": {"mode": "colocated", "roleResources": dict(spec.role_resources)},
        "data": {"trainFiles": [str(paths.prompts)], "preparedDir": str(paths.prepared(spec.name)), "oversize": "drop"},
        "metrics": {"port": spec.metrics_port, "address": "127.0.0.1", "stepsFile": str(paths.steps_file(spec.name))},
    }


def prepare_inputs(paths: Paths, steps: int, reward_model: bool = False) -> None:
    """Model, tokenizer and prompts (enough for `steps` steps in one epoch); kept when already there."""
    if not (paths.model / "config.json").exists():
        tiny_model.build_model_dir(paths.model)
    if reward_model and not (paths.reward_model / "config.json").exists():
        tiny_model.build_reward_model_dir(paths.reward_model)
    if not paths.prompts.exists() or len(paths.prompts.read_text().splitlines()) < PROMPTS_PER_STEP * (steps + 1):
        tiny_model.write_prompts(paths.prompts, PROMPTS_PER_STEP * (steps + 1))


def write_config(spec: RunSpec, paths: Paths) -> Path:
    """grpo-train's verl.yaml for the run (a stock run's twin: the keys grpo-train would derive)."""
    import yaml

    doc = {**verl_keys(spec, paths), "grpo": grpo_section(spec, paths)}
    target = paths.config(spec.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


def hydra_value(value: Any) -> str:
    """A Python value as a hydra command-line override value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if value is None:
        return "null"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


SETUP_HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
LOGPROBS_FIX_HOOK = "grpo_trainer.token_logprobs.setup_worker"


def stock_overrides(spec: RunSpec, paths: Paths) -> list[str]:
    """verl overrides for stock main_ppo: the shared keys plus what grpo-train derives from `grpo:`."""
    from grpo_trainer.config import build_config
    from omegaconf import OmegaConf

    built = build_config(str(write_config(spec, paths)), strict=True)
    derived = {
        k: OmegaConf.to_container(v) if OmegaConf.is_config(v := OmegaConf.select(built.verl, k)) else v
        for k in DERIVED_KEYS
    }
    overrides = [f"{k}={hydra_value(v)}" for k, v in {**verl_keys(spec, paths), **derived}.items()]
    if spec.logprobs_fix:
        overrides.append(f"++{SETUP_HOOK_KEY}={hydra_value(LOGPROBS_FIX_HOOK)}")
    return overrides


def tool(name: str, module: str) -> list[str]:
    """The console script when installed, else `python -m module` (a --target install has no scripts)."""
    found = shutil.which(name)
    return [found] if found else [sys.executable, "-m", module]


def command(spec: RunSpec, paths: Paths) -> list[str]:
    if spec.kind == "stock":
        return [sys.executable, "-m", "verl.trainer.main_ppo", *stock_overrides(spec, paths)]
    return [*tool("grpo-train", "grpo_trainer.cli"), "--config_path", str(write_config(spec, paths))]


def run_env(spec: RunSpec) -> dict[str, str]:
    """Environment of the run's process: the bench's, and which Ray cluster it uses."""
    # "local": a cluster of its own even when `ray start` left an address file on this machine
    return {**ENV, "RAY_ADDRESS": spec.ray_address or "local", **dict(spec.env)}


@dataclass
class Streamed:
    rc: int
    wall_s: float
    first_step_at_s: float | None
    log: Path
    timed_out: bool = False


def stream(
    cmd: list[str],
    log: Path,
    timeout_s: float,
    echo_all: bool = False,
    env: dict[str, str] | None = None,
    on_first_step: Callable[[], None] | None = None,
) -> Streamed:
    """Run cmd, write all output to log (each line with the seconds since the start: bench/gpu/startup.py),
    echo step lines (and everything when asked), kill the whole process group at the timeout.
    on_first_step is called once, from the log reader, when the first step line arrives."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **ENV, **(env or {})}
    start = time.monotonic()
    first_step: list[float] = []
    # a session of its own, so a timeout (and the clean-up after exit) reaches Ray's and vLLM's children too
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        bufsize=1,
        start_new_session=True,
    )

    def pump() -> None:
        assert proc.stdout is not None
        with log.open("w") as f:
            f.write(startup.timed_line(0.0, "$ " + " ".join(cmd)) + "\n")
            for line in proc.stdout:
                elapsed = time.monotonic() - start
                f.write(startup.timed_line(elapsed, line.rstrip("\n")) + "\n")
                is_step = steplog.parse_step_line(line) is not None
                if is_step and not first_step:
                    first_step.append(elapsed)
                    if on_first_step is not None:
                        on_first_step()
                if is_step or echo_all or "Error" in line or "error:" in line:
                    print(f"[{log.stem} {elapsed:7.1f}s] {line.rstrip()[:400]}", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc, timed_out = proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        rc, timed_out = proc.wait(), True
    reader.join(timeout=10)  # children that outlive the command may hold the pipe: end them
    kill_group(proc.pid)
    reader.join()
    return Streamed(rc, time.monotonic() - start, first_step[0] if first_step else None, log, timed_out)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def stop_ray() -> None:
    """Ends every Ray process on the machine: only between runs, never while another run is going."""
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True, check=False)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def copy_checkpoints(source: Path, target: Path) -> None:
    """The source run's checkpoint directory as this run's own (replacing what a run of this name left)."""
    if not (source / "latest_checkpointed_iteration.txt").exists():
        raise FileNotFoundError(f"{source} holds no checkpoint to resume from: run that run first")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)


def latest_step_dir(root: Path) -> Path | None:
    steps = sorted(root.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    return steps[-1] if steps else None


@dataclass
class RunResult:
    run: str
    command: list[str]
    rc: int
    wall_s: float
    first_step_at_s: float | None
    timed_out: bool
    steps: list[dict[str, Any]]
    median_step_s: float | None
    mean_step_s: float | None
    median_throughput: float | None
    spec: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)
    steps_file: str | None = None
    checkpoint: str | None = None
    checkpoint_bytes: int | None = None
    export: dict[str, Any] | None = None
    generation: str | None = None
    generation_error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # the machine's disk reads and CPU while the run went (iosample.summarize): to step 1, and in all
    io: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if self.spec.get("wall_capped"):
            return len(self.steps) >= MIN_TIMED_STEPS
        # a resumed run trains from the step after its checkpoint: it owes the steps from there
        first = min((int(s["step"]) for s in self.steps), default=1)
        owed = int(self.spec.get("steps", 0)) - (first - 1 if self.spec.get("resume_from") else 0)
        return self.rc == 0 and not self.timed_out and len(self.steps) >= owed


def summarize(spec: RunSpec, cmd: list[str], s: Streamed) -> RunResult:
    lines = s.log.read_text(errors="replace").splitlines()
    steps = steplog.parse_steps(lines)
    b = startup.breakdown(lines)
    return RunResult(
        run=spec.name,
        command=cmd,
        rc=s.rc,
        wall_s=round(s.wall_s, 1),
        first_step_at_s=None if s.first_step_at_s is None else round(s.first_step_at_s, 1),
        timed_out=s.timed_out,
        steps=[{"step": st.step, **{k: st.get(k) for k in steplog.SAVED}} for st in steps],
        median_step_s=steplog.median(steps, steplog.STEP_TIME),
        mean_step_s=steplog.mean(steps, steplog.STEP_TIME),
        median_throughput=steplog.median(steps, steplog.THROUGHPUT),
        spec=asdict(spec),
        startup={"phases": b.phases, "first_step_s": b.first_step_s, "first_generation_s": b.first_generation_s},
    )


def export_checkpoint(paths: Paths, run: str, timeout_s: float) -> dict[str, Any]:
    """grpo-export --verify on the run's checkpoint root; its JSON summary (last stdout line)."""
    cmd = [*tool("grpo-export", "grpo_trainer.export"), "--checkpoint", str(paths.checkpoints(run))]
    cmd += ["--target", str(paths.export), "--verify", "--overwrite"]
    out = stream(cmd, paths.logs / f"{run}-export.log", timeout_s, echo_all=True)
    lines = [t[1] for t in map(startup.split_timed, out.log.read_text(errors="replace").splitlines()) if t]
    summary = next((json.loads(ln) for ln in reversed(lines) if ln.startswith("{")), None)
    summary = summary or {"ok": False, "reason": "no JSON summary"}
    return {"rc": out.rc, "command": cmd, "wall_s": round(out.wall_s, 1), **summary}


def generate(model_dir: Path, prompt: str = "Write about cat dog.", max_new_tokens: int = 24) -> str:
    """Greedy generation with the exported model through transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(device)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    ).to(device)
    out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    return tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=False)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "verl", "vllm", "ray", "transformers", "tokenizers", "xgrammar", "apache-tvm-ffi"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except Exception as e:  # report, never fail the run for it
        out["gpu"] = f"unknown ({e})"
    return out


def prepare_data(spec: RunSpec, paths: Paths) -> None:
    """grpo-train's data prep alone: a stock run reads the parquet files grpo-train would have written."""
    from grpo_trainer.cli import prepare_data as prep
    from grpo_trainer.config import build_config

    prep(build_config(str(write_config(spec, paths)), strict=True))


def run(spec: RunSpec, paths: Paths, alone: bool = True, on_first_step: Callable[[], None] | None = None) -> RunResult:
    """One training run (with export and generation when the spec asks). `alone`: no other run is going,
    so Ray's leftovers may be cleaned up machine-wide afterwards."""
    prepare_inputs(paths, spec.steps, reward_model=spec.reward == "model")
    if spec.kind == "stock":
        prepare_data(spec, paths)
    if spec.resume_from is not None:
        copy_checkpoints(paths.checkpoints(spec.resume_from), paths.checkpoints(spec.name))
    cmd = command(spec, paths)
    steps_file = paths.steps_file(spec.name)
    steps_file.unlink(missing_ok=True)
    io_file = paths.logs / f"{spec.name}.io.jsonl"
    with iosample.IoSampler(io_file):
        streamed = stream(cmd, paths.log(spec.name), spec.timeout_s, env=run_env(spec), on_first_step=on_first_step)
    result = summarize(spec, cmd, streamed)
    samples = iosample.load(io_file)
    result.io = {
        "to_first_step": iosample.summarize(samples, streamed.first_step_at_s),
        "run": iosample.summarize(samples),
    }
    if alone:
        stop_ray()
    result.steps_file = str(steps_file) if steps_file.exists() else None
    ckpt = latest_step_dir(paths.checkpoints(spec.name))
    if ckpt is not None:
        result.checkpoint, result.checkpoint_bytes = str(ckpt), dir_size(ckpt)
        if spec.export:
            result.export = export_checkpoint(paths, spec.name, timeout_s=300)
            if result.export.get("ok"):
                try:
                    result.generation = generate(paths.export)
                except Exception as e:  # recorded in the result, which is still written
                    result.generation_error = f"{type(e).__name__}: {e}"
    return result


def run_together(specs: list[RunSpec], paths: Paths) -> list[RunResult]:
    """Runs at the same time on the one GPU (each shares it: spec.shared_gpu), each with its own Ray."""
    unshared = [s.name for s in specs if not s.shared_gpu]
    if len(specs) > 1 and unshared:
        raise ValueError(f"runs that do not share the GPU cannot run beside others: {unshared}")
    for spec in specs:  # inputs first, once: the runs must not build the same files at the same time
        prepare_inputs(paths, spec.steps, reward_model=spec.reward == "model")
    results: dict[str, RunResult] = {}

    def one(spec: RunSpec) -> None:
        results[spec.name] = run(spec, paths, alone=False)

    threads = [threading.Thread(target=one, args=(s,), name=s.name) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop_ray()
    return [results[s.name] for s in specs if s.name in results]


def save_result(result: RunResult, paths: Paths, out: Path) -> None:
    """<run>.json, the run's gzipped logs and its steps file under out."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result.run}.json").write_text(json.dumps(asdict(result), indent=1))
    for log in [*paths.logs.glob(f"{result.run}*.log"), *paths.logs.glob(f"{result.run}.io.jsonl")]:
        with log.open("rb") as src, gzip.open(out / f"{log.name}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    if result.steps_file:
        shutil.copyfile(result.steps_file, out / f"{result.run}.steps.jsonl")


def steps_of(saved: list[dict[str, Any]]) -> list[steplog.Step]:
    """The Steps of a result's `steps` list."""
    return [steplog.Step(s["step"], {k: v for k, v in s.items() if k != "step" and v is not None}) for s in saved]


def open_text(path: Path) -> Any:
    return gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace")


def load_steps(path: Path) -> list[steplog.Step]:
    """Steps from a result JSON, or from a run's log (plain or gzipped): the logs also hold every phase timer."""
    if path.suffix == ".json":
        return steps_of(json.loads(path.read_text())["steps"])
    with open_text(path) as f:
        return steplog.parse_steps(f)


def print_result(result: RunResult) -> None:
    steps = steps_of(result.steps)
    print(f"\n== {result.run}: rc={result.rc} wall={result.wall_s}s first step line at {result.first_step_at_s}s")
    print(steplog.step_table(steps))
    print(
        f"median step (excl. step 1): {steplog.fmt(result.median_step_s, 3)} s; "
        f"median throughput {steplog.fmt(result.median_throughput, 1)} tokens/s"
    )
    if result.startup:
        print("start-up: " + json.dumps(result.startup))
    if result.checkpoint:
        print(f"checkpoint {result.checkpoint}: {result.checkpoint_bytes} bytes")
    if result.export is not None:
        print(f"export: {json.dumps(result.export)[:1500]}")
    if result.generation is not None:
        print(f"generation: {result.generation!r}")
    if result.generation_error is not None:
        print(f"generation failed: {result.generation_error}")


def report(ours_path: Path, stock_path: Path) -> str:
    """The step-time ratio ours/stock (steps 2..N) and the phase timers' medians, from result JSONs or logs."""
    ours, stock = load_steps(ours_path), load_steps(stock_path)
    med_o, med_s = steplog.median(ours, steplog.STEP_TIME), steplog.median(stock, steplog.STEP_TIME)
    mean_o, mean_s = steplog.mean(ours, steplog.STEP_TIME), steplog.mean(stock, steplog.STEP_TIME)
    n_o, n_s = len(steplog.values(ours, steplog.STEP_TIME)), len(steplog.values(stock, steplog.STEP_TIME))
    r_med, r_mean = steplog.ratio(med_o, med_s), steplog.ratio(mean_o, mean_s)
    lines = [
        f"ours/stock step time, steps 2..N ({n_o} and {n_s} steps): median {steplog.fmt(r_med, 3)} "
        f"({steplog.fmt(med_o, 3)} s / {steplog.fmt(med_s, 3)} s), mean {steplog.fmt(r_mean, 3)} "
        f"({steplog.fmt(mean_o, 3)} s / {steplog.fmt(mean_s, 3)} s)"
    ]
    if (rse := steplog.ratio_of_means(ours, stock)) is not None:
        r, se = rse
        lines.append(
            f"ratio of means {r:.3f} +- {se:.3f} (standard error from the step-to-step spread; "
            f"95 % interval {r - 1.96 * se:.3f} to {r + 1.96 * se:.3f})"
        )
    lines += ["", "| phase (median s, steps 2..N) | ours | stock | ours/stock |", "|---|---:|---:|---:|"]
    for phase, key in zip(steplog.PHASES, steplog.PHASE_KEYS, strict=True):
        o, k = steplog.median(ours, key), steplog.median(stock, key)
        if o is not None or k is not None:
            lines.append(
                f"| {phase} | {steplog.fmt(o, 3)} | {steplog.fmt(k, 3)} | {steplog.fmt(steplog.ratio(o, k), 3)} |"
            )
    return "\n".join(lines)


def report_pairs(pairs: list[tuple[Path, Path]]) -> str:
    """Step-time ratio ours/stock per pair and by the mean of pairs (the ABBA figure), from JSONs or logs."""
    ratios = pairs_ratio([(load_steps(o), load_steps(s)) for o, s in pairs])
    lines = ["| pair | ours mean step (s) | stock mean step (s) | ours/stock (means) | ours/stock (medians) |"]
    lines.append("|---:|---:|---:|---:|---:|")
    for i, p in enumerate(ratios.pairs, 1):
        lines.append(
            f"| {i} | {p.ours_mean:.3f} | {p.stock_mean:.3f} | {p.ratio_of_means:.3f} | {p.ratio_of_medians:.3f} |"
        )
    lines.append("")
    lines.append(ratios.describe())
    return "\n".join(lines)


def startup_report(logs: dict[str, Path]) -> str:
    """The start-up breakdown table of several runs' timed logs (plain or gzipped)."""
    runs = {}
    for name, path in logs.items():
        with open_text(path) as f:
            runs[name] = startup.breakdown(f.read().splitlines())
    return startup.table(runs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/grpo-gpu"), help="work dir (model, data, checkpoints)")
    p.add_argument("--run", choices=("ours", "stock", "both"), default="both")
    p.add_argument("--name", help="run name (files); default: the --run kind")
    p.add_argument("--steps", type=int, default=11, help="GRPO steps per run (>= 10 timed after step 1)")
    p.add_argument("--lr", type=float, default=1e-5, help="actor learning rate")
    p.add_argument("--reward", choices=("length", "token", "model"), default="length")
    p.add_argument("--temperature", type=float, help="rollout sampling temperature (verl's default 1.0)")
    p.add_argument("--export", action="store_true", help="ours: grpo-export --verify and a generation afterwards")
    p.add_argument("--timeout", type=float, default=540, help="seconds per training run before it is killed")
    p.add_argument("--out", type=Path, help="write <run>.json, gzipped logs and the steps file here")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more verl key for the run(s), YAML-typed, e.g. "
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni",
    )
    return p.parse_args(argv)


def parse_sets(items: list[str]) -> tuple[tuple[str, Any], ...]:
    """["a.b=1", "+c=x"] -> (("a.b", 1), ("+c", "x")), values typed as YAML reads them."""
    import yaml

    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        pairs.append((key, yaml.safe_load(raw)))
    return tuple(pairs)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["report"]:
        print(report(Path(args[1]), Path(args[2])))
        return 0
    if args[:1] == ["pairs"]:
        paths_ = [Path(a) for a in args[1:]]
        print(report_pairs(list(zip(paths_[0::2], paths_[1::2], strict=True))))
        return 0
    if args[:1] == ["startup"]:
        print(startup_report({Path(a).name.split(".")[0]: Path(a) for a in args[1:]}))
        return 0
    a = parse_args(args)
    paths = Paths(a.work.resolve())
    kinds = {"ours": ["ours"], "stock": ["stock"], "both": ["ours", "stock"]}[a.run]
    ok = True
    for kind in kinds:
        common = {"kind": kind, "steps": a.steps, "timeout_s": a.timeout, "extra_keys": parse_sets(a.set)}
        if kind == "ours":
            common |= {"lr": a.lr, "reward": a.reward, "temperature": a.temperature, "export": a.export}
        spec = RunSpec(name=a.name if a.name and len(kinds) == 1 else kind, **common)
        result = run(spec, paths)
        result.versions = versions()
        print_result(result)
        if a.out:
            save_result(result, paths, a.out)
        ok = ok and result.ok
    return 0 if ok else 1


if __name__ == "__main__":  # vLLM's engine process re-imports __main__: never run twice
    sys.exit(main())
