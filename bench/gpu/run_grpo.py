"""GPU smoke run and step-time benchmark: `grpo-train` against stock `python -m verl.trainer.main_ppo`.

    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run ours    # grpo-train, checkpoint, export, generate
    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run stock   # verl's main_ppo, same model/data/keys
    python bench/gpu/run_grpo.py --work /tmp/grpo-gpu --run both
    python bench/gpu/run_grpo.py report OURS STOCK                  # ratio and phase timers (result JSONs or logs)

Needs one NVIDIA GPU and the trainer image's stack (verl 0.9.1, vLLM 0.24.0, Ray). Everything else is built
here: a tiny random Qwen2 model with a locally trained byte-level BPE tokenizer, a JSONL prompt set (converted
to parquet by grpo_trainer's data prep), the length reward, colocated on 1 GPU with TP 1.

Both runs get the same verl keys: the shared VERL_KEYS, plus the values grpo-train derives (parquet files,
max_model_len, the length reward manager, validation off), read from grpo-train's own config builder; stock
runs without our worker hook and tracking backend. Step times come from verl's console logger; step 1
(warm-up) is left out of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import steplog
import tiny_model

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


@dataclass(frozen=True)
class Paths:
    work: Path

    @property
    def model(self) -> Path:
        return self.work / "model"

    @property
    def prompts(self) -> Path:
        return self.work / "prompts" / "train.jsonl"

    @property
    def prepared(self) -> Path:
        return self.work / "prepared"

    @property
    def config(self) -> Path:
        return self.work / "verl.yaml"

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    @property
    def export(self) -> Path:
        return self.work / "export"

    def checkpoints(self, run: str) -> Path:
        return self.work / f"checkpoints-{run}"


def verl_keys(paths: Paths, steps: int, run: str) -> dict[str, Any]:
    """The verl keys both runs share (known to work on one H200 with the image's stack, issue 8)."""
    return {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "data.train_batch_size": PROMPTS_PER_STEP,
        "data.max_prompt_length": 64,
        "data.max_response_length": 64,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": str(paths.model),
        "actor_rollout_ref.model.use_remove_padding": False,  # no flash-attn in the image
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.actor.use_torch_compile": False,
        "actor_rollout_ref.actor.optim.lr": 1e-5,
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
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 1,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": steps,
        "trainer.save_freq": steps,
        "trainer.default_local_dir": str(paths.checkpoints(run)),
        "trainer.project_name": "grpo-gpu-smoke",
        "trainer.experiment_name": run,
        "trainer.logger": ["console"],
    }


def grpo_section(paths: Paths) -> dict[str, Any]:
    return {
        "maxModelLenFactor": 1.2,
        "reward": {"type": "length"},
        "placement": {"mode": "colocated"},
        "data": {"trainFiles": [str(paths.prompts)], "preparedDir": str(paths.prepared), "oversize": "drop"},
        "metrics": {"port": 9400, "address": "127.0.0.1"},
    }


def prepare_inputs(paths: Paths, steps: int) -> None:
    """Model, tokenizer and prompts (enough for `steps` steps in one epoch); kept when already there."""
    if not (paths.model / "config.json").exists():
        tiny_model.build_model_dir(paths.model)
    if not paths.prompts.exists():
        tiny_model.write_prompts(paths.prompts, PROMPTS_PER_STEP * (steps + 1))


def write_config(paths: Paths, steps: int) -> Path:
    import yaml

    doc = {**verl_keys(paths, steps, "ours"), "grpo": grpo_section(paths)}
    paths.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return paths.config


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


def stock_overrides(paths: Paths, steps: int) -> list[str]:
    """verl overrides for stock main_ppo: the shared keys plus what grpo-train derives from `grpo:`."""
    from grpo_trainer.config import build_config
    from omegaconf import OmegaConf

    built = build_config(str(write_config(paths, steps)), strict=True)
    keys = verl_keys(paths, steps, "stock")
    derived = {
        k: OmegaConf.to_container(v) if OmegaConf.is_config(v := OmegaConf.select(built.verl, k)) else v
        for k in DERIVED_KEYS
    }
    return [f"{k}={hydra_value(v)}" for k, v in {**keys, **derived}.items()]


def tool(name: str, module: str) -> list[str]:
    """The console script when installed, else `python -m module` (a --target install has no scripts)."""
    found = shutil.which(name)
    return [found] if found else [sys.executable, "-m", module]


def ours_command(paths: Paths, steps: int) -> list[str]:
    return [*tool("grpo-train", "grpo_trainer.cli"), "--config_path", str(write_config(paths, steps))]


def stock_command(paths: Paths, steps: int) -> list[str]:
    return [sys.executable, "-m", "verl.trainer.main_ppo", *stock_overrides(paths, steps)]


@dataclass
class Streamed:
    rc: int
    wall_s: float
    first_step_at_s: float | None
    log: Path
    timed_out: bool = False


def stream(cmd: list[str], log: Path, timeout_s: float, echo_all: bool = False) -> Streamed:
    """Run cmd, write all output to log, echo step lines (and everything when asked), kill at timeout."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **ENV}
    start = time.monotonic()
    first_step: list[float] = []
    # a session of its own, so a timeout (and the clean-up after exit) reaches Ray's and vLLM's children too
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1, start_new_session=True
    )

    def pump() -> None:
        assert proc.stdout is not None
        with log.open("w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            for line in proc.stdout:
                f.write(line)
                is_step = steplog.parse_step_line(line) is not None
                if is_step and not first_step:
                    first_step.append(time.monotonic() - start)
                if is_step or echo_all or "Error" in line or "error:" in line:
                    print(f"[{time.monotonic() - start:7.1f}s] {line.rstrip()[:400]}", flush=True)

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
    """Leftover Ray processes of a run would hold GPU memory during the next one."""
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True, check=False)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


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
    checkpoint: str | None = None
    checkpoint_bytes: int | None = None
    export: dict[str, Any] | None = None
    generation: str | None = None
    generation_error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)


def summarize(run: str, cmd: list[str], s: Streamed) -> RunResult:
    steps = steplog.parse_steps(s.log.read_text(errors="replace").splitlines())
    return RunResult(
        run=run,
        command=cmd,
        rc=s.rc,
        wall_s=round(s.wall_s, 1),
        first_step_at_s=None if s.first_step_at_s is None else round(s.first_step_at_s, 1),
        timed_out=s.timed_out,
        steps=[{"step": st.step, **{k: st.get(k) for k in steplog.SAVED}} for st in steps],
        median_step_s=steplog.median(steps, steplog.STEP_TIME),
        mean_step_s=steplog.mean(steps, steplog.STEP_TIME),
        median_throughput=steplog.median(steps, steplog.THROUGHPUT),
    )


def export_checkpoint(paths: Paths, run: str, timeout_s: float) -> dict[str, Any]:
    """grpo-export --verify on the run's checkpoint root; its JSON summary (last stdout line)."""
    cmd = [*tool("grpo-export", "grpo_trainer.export"), "--checkpoint", str(paths.checkpoints(run))]
    cmd += ["--target", str(paths.export), "--verify", "--overwrite"]
    out = stream(cmd, paths.logs / "export.log", timeout_s, echo_all=True)
    lines = [ln for ln in out.log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {"ok": False, "reason": "no JSON summary"}
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


def run_ours(paths: Paths, steps: int, timeout_s: float) -> RunResult:
    cmd = ours_command(paths, steps)
    result = summarize("ours", cmd, stream(cmd, paths.logs / "ours.log", timeout_s))
    stop_ray()
    ckpt = latest_step_dir(paths.checkpoints("ours"))
    if ckpt is not None:
        result.checkpoint, result.checkpoint_bytes = str(ckpt), dir_size(ckpt)
        result.export = export_checkpoint(paths, "ours", timeout_s=300)
        if result.export.get("ok"):
            try:
                result.generation = generate(paths.export)
            except Exception as e:  # recorded in the result, which is still written
                result.generation_error = f"{type(e).__name__}: {e}"
    return result


def run_stock(paths: Paths, steps: int, timeout_s: float) -> RunResult:
    cmd = stock_command(paths, steps)
    if not all(Path(f).exists() for f in data_files(paths, steps)):
        prepare_data(paths, steps)
    result = summarize("stock", cmd, stream(cmd, paths.logs / "stock.log", timeout_s))
    stop_ray()
    ckpt = latest_step_dir(paths.checkpoints("stock"))
    if ckpt is not None:
        result.checkpoint, result.checkpoint_bytes = str(ckpt), dir_size(ckpt)
    return result


def data_files(paths: Paths, steps: int) -> list[str]:
    from grpo_trainer.config import build_config

    built = build_config(str(write_config(paths, steps)), strict=True)
    return [*built.verl.data.train_files, *built.verl.data.val_files]


def prepare_data(paths: Paths, steps: int) -> None:
    """grpo-train's data prep alone (stock run without an ours run before it in this work dir)."""
    from grpo_trainer.cli import prepare_data as prep
    from grpo_trainer.config import build_config

    prep(build_config(str(write_config(paths, steps)), strict=True))


def save_result(result: RunResult, paths: Paths, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{result.run}.json").write_text(json.dumps(asdict(result), indent=1))
    for log in paths.logs.glob("*.log"):
        with log.open("rb") as src, gzip.open(out / f"{log.name}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)


def steps_of(saved: list[dict[str, Any]]) -> list[steplog.Step]:
    """The Steps of a result's `steps` list."""
    return [steplog.Step(s["step"], {k: v for k, v in s.items() if k != "step" and v is not None}) for s in saved]


def load_steps(path: Path) -> list[steplog.Step]:
    """Steps from a result JSON, or from a run's log (plain or gzipped): the logs also hold every phase timer."""
    if path.suffix == ".json":
        return steps_of(json.loads(path.read_text())["steps"])
    with gzip.open(path, "rt", errors="replace") if path.suffix == ".gz" else path.open(errors="replace") as f:
        return steplog.parse_steps(f)


def print_result(result: RunResult) -> None:
    steps = steps_of(result.steps)
    print(f"\n== {result.run}: rc={result.rc} wall={result.wall_s}s first step line at {result.first_step_at_s}s")
    print(steplog.step_table(steps))
    print(
        f"median step (excl. step 1): {steplog.fmt(result.median_step_s, 3)} s; "
        f"median throughput {steplog.fmt(result.median_throughput, 1)} tokens/s"
    )
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("/tmp/grpo-gpu"), help="work dir (model, data, checkpoints)")
    p.add_argument("--run", choices=("ours", "stock", "both"), default="both")
    p.add_argument("--steps", type=int, default=11, help="GRPO steps per run (>= 10 timed after step 1)")
    p.add_argument("--timeout", type=float, default=540, help="seconds per training run before it is killed")
    p.add_argument("--out", type=Path, help="write <run>.json and gzipped logs here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "report":
        print(report(Path(sys.argv[2]), Path(sys.argv[3])))
        return 0
    a = parse_args(argv)
    paths = Paths(a.work.resolve())
    prepare_inputs(paths, a.steps)
    runs = {"ours": [run_ours], "stock": [run_stock], "both": [run_ours, run_stock]}[a.run]
    ok = True
    for fn in runs:
        result = fn(paths, a.steps, a.timeout)
        result.versions = versions()
        print_result(result)
        if a.out:
            save_result(result, paths, a.out)
        ok = ok and result.rc == 0 and len(result.steps) >= a.steps
    return 0 if ok else 1


if __name__ == "__main__":  # vLLM's engine process re-imports __main__: never run twice
    sys.exit(main())
