"""Issue 33.3: tokens/s of the config the operator renders (A) against verl's own example settings (B), one GPU.

    python bench/gpu/throughput.py configs --shape qwen2.5-0.5b --gpu-memory 150754820096 --work DIR   # print A, B
    python bench/gpu/throughput.py call --shape qwen2.5-0.5b --order A,B --wall-cap 240 --deadline S --out $OUT
    python bench/gpu/throughput.py report RESULT_DIR...      # here: the A/B table from what came back

Both run through grpo-train on the same random-init model of a Qwen2.5 shape (nothing downloaded), the same
prompts (each about PROMPT_TOKENS long), 64 prompts x 8 responses of exactly 512 tokens (ignore_eos), the
length reward, the same seed. Only the training config differs:

- A: a GRPOJob with the model, batch and lengths and one GPU, nothing else set, through the operator's own
  plan() and verl_config(); then the preflight's sizing (grpo_trainer/preflight/sizing.py) for this model and
  the GPU's real memory, rendered again with the sized values, as the operator does once the preflight passed.
- B: verl's FSDP GRPO example, examples/grpo_trainer/run_qwen2-7b.sh (EXAMPLE_SCRIPT), its knobs as they are
  except where one GPU, the issue's batch and lengths force a change (EXAMPLE_KEYS, each change commented).

Every run is alone on the machine and stopped at a fixed wall time (session.run_timed); its steps after step 1 are
its sample. The GPU's memory in use is sampled once a second for the whole-GPU peak.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_grpo

PROMPTS = 64
GROUP = 8
PROMPT_LEN = 256
RESPONSE_LEN = 512
PROMPT_TOKENS = 240  # chat-templated prompt tokens: under PROMPT_LEN, so no prompt is dropped
# Qwen2.5's published config.json shapes (bench/fit/measure.py has the Qwen2 ones the fit was measured on).
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "intermediate_size": 4864},
    "qwen2.5-1.5b": {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
                     "num_key_value_heads": 2, "intermediate_size": 8960},
}
VOCAB = 151936
EXAMPLE_SCRIPT = "examples/grpo_trainer/run_qwen2-7b.sh (volcengine/verl b178a3cd5, the newest stored snapshot)"
# B: the script's knobs. "forced" comments say what one GPU, the batch or its lengths change.
EXAMPLE_KEYS: dict[str, Any] = {
    "algorithm.adv_estimator": "grpo",
    "data.train_batch_size": PROMPTS,  # forced: 1024 -> the 64 prompts
    "data.max_prompt_length": PROMPT_LEN,  # forced: 512 -> 256
    "data.max_response_length": RESPONSE_LEN,  # forced: 1024 -> 512
    "data.filter_overlong_prompts": True,
    "data.truncation": "error",
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.actor.ppo_mini_batch_size": PROMPTS,  # forced: 256 exceeds the batch of 64
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32,  # forced: 40 does not divide 512; 32 does
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 32,  # forced: 40 -> 32, as above
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,  # forced: 2 -> one GPU
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.6,
    "actor_rollout_ref.rollout.n": GROUP,  # forced: 5 -> the 8
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 32,  # forced: 40 -> 32, as above
    "actor_rollout_ref.ref.fsdp_config.param_offload": True,
    "algorithm.use_kl_in_reward": False,
    "trainer.critic_warmup": 0,
    # forced by the image: no flash-attn, and verl asks for flash_attention_2 unless told
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
}
# Both: the benchmark's fixed response length.
FIXED_LENGTH = {"actor_rollout_ref.rollout.ignore_eos": True}
# Keys of the operator's render that name the cluster's paths and the job's bookkeeping: the bench sets its own
# (run_grpo.environment_keys), and the trainer's `grpo` mapping comes from run_grpo.grpo_section.
CLUSTER_KEYS = ("trainer.max_actor_ckpt_to_keep", "trainer.resume_mode")


def grpojob_spec(steps: int) -> dict[str, Any]:
    """The GRPOJob of config A: model, batch, lengths and one GPU; nothing else but the fixed length."""
    return {
        "model": {"claimName": "models", "path": "policy"},
        "data": {"claimName": "datasets", "trainFiles": ["prompts/train.jsonl"], "maxPromptLength": PROMPT_LEN,
                 "maxResponseLength": RESPONSE_LEN, "trainBatchSize": PROMPTS},
        "training": {"totalSteps": steps},
        "algorithm": {"groupSize": GROUP},
        "reward": {"type": "length"},
        "rollout": {"tensorParallelSize": 1},  # one GPU: the default 2 cannot divide it
        "placement": {"mode": "colocated", "gpusPerNode": 1, "roles": {"actor": {"gpus": 1}}},
        "verl": dict(FIXED_LENGTH),
    }


def operator_render(spec_body: Mapping[str, Any], sized: Any = None) -> dict[str, Any]:
    """verl.yaml's mapping as the operator renders it for this GRPOJob (with the preflight's sizing, if any)."""
    from grpo_operator.api import GRPOJobSpec
    from grpo_operator.plan import plan
    from grpo_operator.render.verl_config import verl_config

    spec = GRPOJobSpec.model_validate(dict(spec_body))
    return verl_config(spec, plan(spec, name="bench", namespace="bench", default_image="trainer"), sized)


def training_keys(rendered: Mapping[str, Any]) -> dict[str, Any]:
    """The rendered verl keys the bench runs with: all but the `grpo` mapping and the cluster's paths."""
    return {k: v for k, v in rendered.items() if k != "grpo" and k not in CLUSTER_KEYS}


def config_a(spec_body: Mapping[str, Any], paths: run_grpo.Paths, gpu_memory: int, steps: int) -> tuple[
        dict[str, Any], str]:
    """A's verl keys, sized by the preflight's own function for this model and GPU, and the sizing's summary."""
    from grpo_operator.render.verl_config import SizedKnobs
    from grpo_trainer.config import build_config
    from grpo_trainer.preflight.memory import sizing

    rendered = operator_render(spec_body)
    unsized = run_grpo.RunSpec("A-unsized", steps=steps, keys_only=True, extra_keys=tuple(training_keys(
        rendered).items()))
    built = build_config(str(run_grpo.write_config(unsized, paths)), strict=False)
    model_config = json.loads((paths.model / "config.json").read_text())
    chosen = sizing(built.verl, model_config, {"actor": gpu_memory}, rendered["grpo"]["sizedKeys"])
    if chosen is None or not chosen.choices:
        return training_keys(rendered), "not sized"
    knobs = SizedKnobs(tuple(chosen.values().items()), chosen.summary())
    return training_keys(operator_render(spec_body, knobs)), chosen.summary()


def config_b() -> dict[str, Any]:
    return {**EXAMPLE_KEYS, **FIXED_LENGTH}


# ----------------------------------------------------------------------------------------------- inputs


def build_model(target: Path, shape: Mapping[str, Any]) -> None:
    """A random-init Qwen2.5-shaped model (bf16, tied embeddings) with the bench's tokenizer; kept when there."""
    if (target / "config.json").exists():
        return
    import tiny_model
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_model.build_tokenizer(1024)
    tokenizer.save_pretrained(target)
    eos, pad = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(vocab_size=VOCAB, max_position_embeddings=32768, tie_word_embeddings=True,
                         bos_token_id=pad, eos_token_id=eos, pad_token_id=pad, torch_dtype="bfloat16",
                         architectures=["Qwen2ForCausalLM"], **shape)
    torch.manual_seed(0)
    # on the CPU: a CUDA context here would hold GPU memory (3 GiB on 2026-12-06 b) through every run of the call
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(target)
    GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad).save_pretrained(target)


def write_long_prompts(path: Path, tokenizer_dir: Path, n: int, tokens: int = PROMPT_TOKENS, seed: int = 1) -> None:
    """n prompts of at most `tokens` chat-templated tokens each, as many words as fit (found by bisection)."""
    import random

    import tiny_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = random.Random(seed)

    def length(words: list[str]) -> int:
        text = tok.apply_chat_template([{"role": "user", "content": " ".join(words)}], add_generation_prompt=True,
                                       tokenize=False)
        return len(tok.encode(text, add_special_tokens=False))

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(n):
            words = ["Write", "about", *(rng.choice(tiny_model.WORDS) for _ in range(2 * tokens))]
            lo, hi = 2, len(words)  # the most words whose prompt fits `tokens`
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if length(words[:mid]) <= tokens else (lo, mid - 1)
            f.write(json.dumps({"prompt": " ".join(words[:lo]), "data_source": "tiny", "extra_info": {"i": i}}) + "\n")


# ----------------------------------------------------------------------------------------------- running


@dataclass
class MemoryPeak:
    """The GPU's memory in use (nvidia-smi), sampled once a second; the most seen."""

    peak_mib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, check=False).stdout.split()
            if out and out[0].isdigit():
                self.peak_mib = max(self.peak_mib, int(out[0]))

    def __enter__(self) -> MemoryPeak:
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def gpu_memory_bytes() -> int:
    """torch's figure for the GPU's memory (what the preflight sizes from), read in a child process so that this
    one never holds a CUDA context beside the runs."""
    code = "import torch; print(torch.cuda.get_device_properties(0).total_memory)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def specs(order: Sequence[str], keys: Mapping[str, dict[str, Any]], wall_cap_s: float,
          first: int = 1) -> list[run_grpo.RunSpec]:
    """Pure: the timed runs in the given order, named by kind and pair number from `first` (A,B,B,A: A1 B1 B2 A2)."""
    seen: dict[str, int] = {}
    runs = []
    for kind in order:
        seen[kind] = seen.get(kind, 0) + 1
        runs.append(run_grpo.RunSpec(f"{kind}{first + seen[kind] - 1}", steps=60, timeout_s=wall_cap_s,
                                     wall_capped=True, keys_only=True, extra_keys=tuple(keys[kind].items())))
    return runs


def run_cap(wall_cap_s: float, runs: int, seconds_left: float | None, per_run_overhead_s: float = 20.0) -> float:
    """Pure: every run's wall cap in one call, the same for all: wall_cap_s, or less where the call's deadline
    leaves less (each run also needs per_run_overhead_s to stop Ray and save its results)."""
    if seconds_left is None:
        return wall_cap_s
    return max(0.0, min(wall_cap_s, seconds_left / runs - per_run_overhead_s))


def gpu_state() -> str:
    """nvidia-smi's one line on the GPU (name, memory, clock, temperature, power); diagnostics only."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used,clocks.sm,temperature.gpu,"
                               "power.draw", "--format=csv,noheader"], capture_output=True, text=True,
                              check=False, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"


def call(shape: str, order: Sequence[str], wall_cap_s: float, work: Path, out: Path, first: int,
         deadline_s: float | None = None) -> int:
    """The call's runs; results under work (not out: the device gives back 8 files at most), bundled into
    out/<shape>-<first>.tar.gz and .json after every run, so a call stopped early still brings back what ran.
    deadline_s: seconds this call may take in all; the runs' common wall cap shrinks to fit it."""
    import time

    import session

    started = time.monotonic()
    paths = run_grpo.Paths(work / shape)
    build_model(paths.model, SHAPES[shape])
    if not paths.prompts.exists():
        write_long_prompts(paths.prompts, paths.model, PROMPTS * 61)
    gpu = gpu_memory_bytes()
    a_keys, why = config_a(grpojob_spec(60), paths, gpu, 60)
    keys = {"A": a_keys, "B": config_b()}
    name = f"{shape}-{first}"
    results = work / "results" / name
    results.mkdir(parents=True, exist_ok=True)
    (results / "configs.json").write_text(json.dumps({"gpu_memory": gpu, "sizing": why, **keys}, indent=1))
    prepared_s = time.monotonic() - started
    left = None if deadline_s is None else deadline_s - prepared_s
    cap = run_cap(wall_cap_s, len(order), left)
    runs = specs(order, keys, cap, first)
    summary: dict[str, Any] = {"shape": shape, "sizing": why, "order": list(order), "wall_cap_s": round(cap, 1),
                               "prepared_s": round(prepared_s, 1), "gpu_memory": gpu}
    print(json.dumps({"prepared_s": round(prepared_s, 1), "wall_cap_s": round(cap, 1), "sizing": why}), flush=True)
    session.bundle(results, out, name, summary)
    for spec in runs:
        before = gpu_state()
        with MemoryPeak() as memory:
            result = session.run_timed([spec], paths, results)[0]
        summary[spec.name] = {**run_summary(results / f"{spec.name}.steps.jsonl"), "gpu_peak_mib": memory.peak_mib,
                              "rc": result.rc, "wall_s": result.wall_s, "timed_out": result.timed_out,
                              "first_step_at_s": result.first_step_at_s, "gpu_before": before}
        print(json.dumps({spec.name: summary[spec.name]}), flush=True)
        session.bundle(results, out, name, summary)
    return 0


# ----------------------------------------------------------------------------------------------- report

METRICS = ("perf/throughput", "perf/mfu/actor", "perf/mfu/actor_infer", "timing_s/step", "timing_s/gen",
           "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor", "timing_s/update_weights",
           "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")


def run_summary(steps_file: Path) -> dict[str, Any]:
    """Medians over steps 2..N of each metric, the step count, and the mean step time."""
    if not steps_file.exists():
        return {"steps": 0}
    rows = [json.loads(line) for line in steps_file.read_text().splitlines() if line.strip()]
    timed = [r for r in rows if int(r.get("step", r.get("training/global_step", 0)) or 0) >= 2]
    out: dict[str, Any] = {"steps": len(rows), "timed_steps": len(timed)}
    for key in METRICS:
        values = [float(r[key]) for r in timed if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = round(statistics.median(values), 4)
    steps = [float(r["timing_s/step"]) for r in timed if isinstance(r.get("timing_s/step"), (int, float))]
    if steps:
        out["mean_step_s"] = round(statistics.mean(steps), 3)
    return out


def report(folders: Sequence[Path]) -> str:
    """The A/B table of every pair found (A<i> with B<i>), from the runs' steps files."""
    lines = ["| shape | pair | A tokens/s/GPU | B tokens/s/GPU | A/B | A MFU | B MFU | A step s | B step s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for folder in folders:
        runs = {p.name.split(".")[0]: run_summary(p) for p in sorted(Path(folder).glob("*.steps.jsonl"))}
        for name in sorted(k for k in runs if k.startswith("A")):
            pair = name[1:]
            a, b = runs[name], runs.get(f"B{pair}", {})
            ta, tb = a.get("perf/throughput"), b.get("perf/throughput")
            ratio = f"{ta / tb:.2f}" if ta and tb else "-"
            lines.append(f"| {Path(folder).name} | {pair} | {ta} | {tb} | {ratio} | "
                         f"{a.get('perf/mfu/actor')} | {b.get('perf/mfu/actor')} | {a.get('mean_step_s')} | "
                         f"{b.get('mean_step_s')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("call")
    c.add_argument("--shape", choices=sorted(SHAPES), required=True)
    c.add_argument("--order", default="A,B")
    c.add_argument("--wall-cap", type=float, default=240.0)
    c.add_argument("--first", type=int, default=1, help="number of the first pair in this call (names A<n>, B<n>)")
    c.add_argument("--work", type=Path, default=Path("/tmp/gpuw/throughput"))
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--deadline", type=float, default=None,
                   help="seconds the whole call may take; the runs' common wall cap shrinks to fit")
    s = sub.add_parser("configs")
    s.add_argument("--shape", choices=sorted(SHAPES), required=True)
    s.add_argument("--gpu-memory", type=int, required=True)
    s.add_argument("--work", type=Path, required=True)
    r = sub.add_parser("report")
    r.add_argument("folders", nargs="+", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "call":
        return call(a.shape, a.order.split(","), a.wall_cap, a.work, a.out, a.first, a.deadline)
    if a.cmd == "configs":
        paths = run_grpo.Paths(a.work / a.shape)
        build_model(paths.model, SHAPES[a.shape])
        if not paths.prompts.exists():
            write_long_prompts(paths.prompts, paths.model, PROMPTS * 61)
        keys, why = config_a(grpojob_spec(60), paths, a.gpu_memory, 60)
        print(json.dumps({"sizing": why, "A": keys, "B": config_b()}, indent=1, default=str))
        return 0
    print(report(a.folders))
    return 0


if __name__ == "__main__":  # vLLM's engine process re-imports __main__: never run twice
    sys.exit(main())
