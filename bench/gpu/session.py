"""The device session of issue 17 in as few calls as possible: one command per call.

    python bench/gpu/session.py plan                         # the budget table (no GPU needed)
    python bench/gpu/session.py setup --chunks DIR --site DIR --out $OUT
    python bench/gpu/session.py call unmeasured --work DIR --out $OUT     # pytest -m gpu tests/gpu: the batch
    python bench/gpu/session.py call pair --order ours,stock --work DIR --out $OUT
    python bench/gpu/session.py call pair --order ours,ours_before --work DIR --out $OUT   # A/B of a start-up cut
    python bench/gpu/session.py call fit --out $OUT                       # slot (a): issue 16's bench/fit/measure.py
    python bench/gpu/session.py call guardrails --work DIR --out $OUT [--run NAME:key=value,...]   # slot (b)
    python bench/gpu/session.py report RESULTS...             # here: tables from the results that came back

What may share the GPU: runs whose timing is not measured (learning, control, placement with the reward
model, the smoke run, the guardrail runs). Each gets its own Ray cluster (bench/gpu/raycluster.py: `ray start`,
job ids bumped so verl's weight-sync sockets differ) and a small fixed vLLM memory (run_grpo.SHARED_*), and
they run at the same time. Timed runs (the ours/stock pairs) run alone, one after the other, each with a
local Ray of its own as grpo-train and main_ppo start it, and each stopped after a fixed wall time: the steps
it reached by then are its sample. Every run has a hard limit; a run that fails is reported, never retried.

Results: every run's JSON, gzipped log and steps file go to a folder that `bundle` packs into one
<call>.tar.gz beside a <call>.json summary under $OUT (the device gives back at most 8 files, 2 folders deep).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning
import placement_check
import placement_run
import run_grpo
from raycluster import NodeSpec, RayCluster

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------- runs

LEARNING_RATE = 1e-3  # what the tiny random model learns the target word with in ~30 steps (RESULTS.md)
SINGLE_NODE = (NodeSpec("head", num_cpus=16, num_gpus=1),)


@dataclass(frozen=True)
class BatchRun:
    """A run of the unmeasured batch: its spec and the Ray cluster it gets."""

    spec: run_grpo.RunSpec
    nodes: tuple[NodeSpec, ...] = SINGLE_NODE
    state_check: bool = False  # query Ray's state API afterwards and check role placement
    ray_logs: bool = False  # bring the cluster's Ray logs (every actor's and vLLM's output) back: <name>-ray-logs.tgz


def unmeasured_batch(learn_steps: int = 30, smoke_steps: int = 10, cap_s: float = 370) -> list[BatchRun]:
    """Pure: the runs of the unmeasured call, all sharing the GPU, each stopped at cap_s at the latest."""
    shared = {"shared_gpu": True, "timeout_s": cap_s}
    return [
        BatchRun(
            run_grpo.RunSpec("learn", steps=learn_steps, lr=LEARNING_RATE, reward="token", metrics_port=9401, **shared)
        ),
        BatchRun(run_grpo.RunSpec("control", steps=learn_steps, lr=0.0, reward="token", metrics_port=9402, **shared)),
        placement_batch_run(cap_s, metrics_port=9403),
        BatchRun(run_grpo.RunSpec("smoke", steps=smoke_steps, export=True, metrics_port=9404, **shared)),
    ]


def placement_batch_run(cap_s: float, metrics_port: int, steps: int = 10) -> BatchRun:
    """Pure: grpo-train with the reward model on a 3-node Ray cluster (head, actor, reward), state checked."""
    spec = run_grpo.RunSpec(
        "placement",
        steps=steps,
        reward="model",
        role_resources=placement_run.ROLE_RESOURCES,
        metrics_port=metrics_port,
        shared_gpu=True,
        timeout_s=cap_s,
    )
    return BatchRun(spec, nodes=placement_run.nodes(), state_check=True, ray_logs=True)


# Slot (b), issue 18: 30-step runs meant to trip the guardrail alerts; every step's metrics are recorded
# (steps/<run>.jsonl). These are defaults: the helper of issue 18 chooses the values (--run overrides).
GUARDRAILS = (
    "guard-lr:lr=0.1,reward=length,steps=40",  # a learning rate far too high (configured: 1e-5)
    "guard-token:lr=1e-3,reward=token,steps=40",  # a reward that pays for a single token
    "guard-temp:lr=1e-5,reward=length,temperature=0.1,steps=40",  # a low sampling temperature
)
OVERRIDABLE = {"lr": float, "reward": str, "temperature": float, "steps": int}


def parse_run(text: str, **defaults: Any) -> run_grpo.RunSpec:
    """Pure: `NAME:key=value,...` (keys lr, reward, temperature, steps) -> a RunSpec."""
    name, _, rest = text.partition(":")
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or key not in OVERRIDABLE:
            raise ValueError(f"--run {text!r}: {item!r} is not one of {sorted(OVERRIDABLE)}=VALUE")
        values[key] = OVERRIDABLE[key](raw)
    return run_grpo.RunSpec(name=name, **{**defaults, **values})


def guardrail_batch(runs: Sequence[str] = GUARDRAILS, cap_s: float = 520) -> list[BatchRun]:
    return [
        BatchRun(parse_run(text, shared_gpu=True, timeout_s=cap_s, metrics_port=9410 + i))
        for i, text in enumerate(runs)
    ]


# Issue 18, second GPU session: the trainer's act path and rollback on real steps. guard-base is the healthy control
# (token reward, lr 1e-5) and the run the resumed attempts start from; guard-token pays for one word (lr 1e-3, long
# enough to collapse); guard-cold samples at temperature 0.2 (entropy low from the start). act: a trip holds for 60 s
# (no operator here), then the attempt fails with GuardrailHoldExpired.
ACT = json.dumps({"mode": "act", "holdSeconds": 60})
OBSERVE = json.dumps({"mode": "observe"})
ROLLBACK_STEP = 25  # guard-base saves here (save_freq 25); the resumed attempts start from it


def guard_act_batch(cap_s: float) -> list[BatchRun]:
    """Pure: three runs at once on the one GPU (call guard-act)."""
    shared = {"shared_gpu": True, "timeout_s": cap_s, "reward": "token"}
    act, observe = (("GRPO_GUARDRAILS", ACT),), (("GRPO_GUARDRAILS", OBSERVE),)
    return [
        BatchRun(run_grpo.RunSpec("guard-base", steps=45, lr=1e-5, save_freq=ROLLBACK_STEP, env=act,
                                  metrics_port=9421, **shared)),
        BatchRun(run_grpo.RunSpec("guard-token", steps=70, lr=1e-3, save_freq=10, env=act, metrics_port=9422,
                                  **shared)),
        BatchRun(run_grpo.RunSpec("guard-cold", steps=45, lr=1e-5, temperature=0.2, env=observe, metrics_port=9423,
                                  **shared)),
    ]


def rollback_env(learning_rate: float) -> tuple[tuple[str, str], ...]:
    """What the operator gives a rolled-back attempt of guard-base (render/guardrails.py), plus observe."""
    request = {"attempt": 2, "step": ROLLBACK_STEP, "detector": "bench", "learningRate": learning_rate,
               "klLossCoef": None}
    return (("GRPO_ROLLBACK", json.dumps(request)), ("GRPO_GUARDRAILS", OBSERVE))


def guard_resume_batch(cap_s: float) -> list[BatchRun]:
    """Pure: two attempts resumed from guard-base's step-25 checkpoint (call guard-resume, after guard-act):
    guard-lr at a learning rate far too high (0.1), guard-half at half the base's (the rollback's change)."""
    shared = {"shared_gpu": True, "timeout_s": cap_s, "reward": "token", "lr": 1e-5, "resume_from": "guard-base"}
    return [
        BatchRun(run_grpo.RunSpec("guard-lr", steps=40, env=rollback_env(0.1), metrics_port=9424, **shared)),
        BatchRun(run_grpo.RunSpec("guard-half", steps=32, env=rollback_env(5e-6), metrics_port=9425, **shared)),
    ]


def guard_collapse_run(cap_s: float) -> BatchRun:
    """Pure: the single-word reward alone on the GPU, fast enough to collapse and be judged within one call.
    At lr 2e-3 (2026-12-04 c, first machine) the policy collapsed (entropy 6.14 -> 0.08, word share 0.99 by
    step 38) but the reward was still creeping up and its spread 0.3x the warm-up's when the call's cap hit;
    4e-3 gets there in about half the steps. Act mode: the trainer pins the checkpoint before the onset and
    holds (60 s, no operator here), then fails with GuardrailHoldExpired."""
    return BatchRun(run_grpo.RunSpec("guard-collapse", steps=45, lr=4e-3, reward="token", save_freq=5,
                                     env=(("GRPO_GUARDRAILS", ACT),), timeout_s=cap_s, metrics_port=9426))


# Variants of ours for a timed A/B of a start-up cut: grpo-train with some cuts switched off through their kill
# switches (docs/troubleshooting.md, "Start-up"). `--order ours,ours_before` then `--order ours_before,ours`.
VARIANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "ours_mp": (("GRPO_VLLM_UNI", "0"),),  # verl's "mp" vLLM executor (one process more)
    "ours_noimport": (("GRPO_WARM_SERVER_IMPORT", "0"),),  # the warm balancer imports vLLM on step 1's path
    "ours_before": (("GRPO_VLLM_UNI", "0"), ("GRPO_WARM_SERVER_IMPORT", "0")),  # grpo-train as of 2026-12-04
    "ours_cold": (("GRPO_WARM_START", "0"),),  # none of the warm start either
    "ours_late_servers": (("GRPO_EARLY_ROLLOUT_SERVERS", "0"),),  # verl creates the vLLM servers after the model load
    "ours_late_ray": (("GRPO_EARLY_RAY", "0"),),  # verl starts Ray after the driver has imported it
    "ours_tq_two_rounds": (("GRPO_TQ_ONE_ROUND", "0"),),  # TransferQueue's own init: controller, then units
    "ours_late_model_info": (("GRPO_VLLM_MODEL_INFO_EARLY", "0"),),  # the vLLM server inspects the model class
}


BASE_RUNS = ("ours", "stock")
# stock verl with our chunked log-probabilities in its workers (run_grpo.RunSpec.logprobs_fix): the baseline of
# issue 33.1's parity once ours has that fix
STOCK_FIXED = "stock_fixed"
STOCK_RUNS = ("stock", STOCK_FIXED)


def parse_variant(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Pure: `NAME:ENV=VALUE,ENV=VALUE` -> (NAME, its environment), a variant of ours for `--order`."""
    name, sep, rest = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.]+", name) or name in (*BASE_RUNS, STOCK_FIXED):
        raise ValueError(f"--variant {text!r}: expected NAME:ENV=VALUE,... with a new NAME of letters, digits, '_'")
    env = []
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--variant {text!r}: {item!r} is not ENV=VALUE")
        env.append((key, value))
    return name, tuple(env)


def timed_pair(
    order: Sequence[str], wall_cap_s: float, variants: Mapping[str, tuple[tuple[str, str], ...]] | None = None
) -> list[run_grpo.RunSpec]:
    """Pure: the timed runs of a pair call, in the given order (ABBA: ours,stock then stock,ours).
    Each asks for more steps than it can reach and is stopped at wall_cap_s: the same time for all.
    stock_fixed is stock with our log-probability fix; any other name is a variant of ours: grpo-train with that
    variant's environment."""
    known = {**VARIANTS, **(variants or {})}
    specs = []
    for name in order:
        if name not in (*BASE_RUNS, STOCK_FIXED) and name not in known:
            raise ValueError(f"--order {name!r}: not ours, stock, {STOCK_FIXED} or a variant "
                             f"({', '.join(sorted(known))})")
        kind = "stock" if name in STOCK_RUNS else "ours"
        env = known.get(name, ())
        specs.append(run_grpo.RunSpec(name, kind=kind, steps=60, timeout_s=wall_cap_s, wall_capped=True, env=env,
                                      logprobs_fix=name == STOCK_FIXED))
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"--order {','.join(order)}: a run name twice would overwrite its own results")
    return specs


# ----------------------------------------------------------------------------------------- executing


@dataclass
class Outcome:
    result: run_grpo.RunResult | None
    error: str | None = None
    placement: dict[str, Any] | None = None


def run_batch(batch: Sequence[BatchRun], paths: run_grpo.Paths, out: Path | None) -> dict[str, Outcome]:
    """The batch's runs at the same time on the one GPU, each in its own Ray cluster; GPU memory sampled."""
    import gpuwatch

    if len({r.spec.metrics_port for r in batch}) != len(batch):
        raise ValueError("runs that share the machine need distinct metrics ports")
    for r in batch:  # inputs once, before the runs start (they must not build the same files at once)
        run_grpo.prepare_inputs(paths, r.spec.steps, reward_model=r.spec.reward == "model")
    outcomes: dict[str, Outcome] = {}

    def one(index: int, item: BatchRun) -> None:
        cluster = RayCluster(item.nodes, dashboard=item.state_check, log_dir=paths.logs / f"{item.spec.name}-ray")
        during: dict[str, Any] = {}
        snapshot = threading.Thread(target=lambda: during.update(_state_or_error(cluster.dashboard_url)))
        try:
            cluster.start()
            cluster.reserve_job_number(index)  # a job id of its own: verl's weight-sync socket path includes it
            spec = dataclasses.replace(item.spec, ray_address=cluster.address)
            # the placement groups are read while the job lives (at its first step): verl removes them at the end
            result = run_grpo.run(spec, paths, alone=False, on_first_step=snapshot.start if item.state_check else None)
            outcome = Outcome(result)
            if item.state_check and cluster.dashboard_url:
                if snapshot.ident is not None:  # started at the first step
                    snapshot.join()
                state = placement_run.merge_states(
                    during.get("state"), placement_run.query_state(cluster.dashboard_url)
                )
                (paths.logs / f"{spec.name}-state.json").write_text(json.dumps(state, default=str))
                outcome.placement = {"state_file": f"{spec.name}-state.json", **_check(state, watch)}
            outcomes[item.spec.name] = outcome
        except Exception as e:  # reported with the others' results; never retried
            outcomes[item.spec.name] = Outcome(None, f"{type(e).__name__}: {e}")
        finally:
            cluster.stop()
            if out is not None and (res := outcomes.get(item.spec.name)) is not None and res.result is not None:
                run_grpo.save_result(res.result, paths, out)
            if out is not None and item.ray_logs:
                _archive_ray_logs(cluster, out / f"{item.spec.name}-ray-logs.tgz")

    with gpuwatch.GpuWatch() as watch:
        threads = [threading.Thread(target=one, args=(i, r), name=r.spec.name) for i, r in enumerate(batch)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if out is not None:
        watch.dump(out / "gpuwatch.json")
        for name, o in outcomes.items():
            (out / f"{name}.outcome.json").write_text(
                json.dumps({"error": o.error, "placement": o.placement, "ok": bool(o.result and o.result.ok)})
            )
        for f in paths.logs.glob("*-state.json"):
            (out / f.name).write_bytes(f.read_bytes())
    run_grpo.stop_ray()
    return outcomes


def _archive_ray_logs(cluster: RayCluster, target: Path) -> None:
    """Diagnostics only: a failure here is printed, never raised (the run's result is saved already)."""
    try:
        saved = cluster.archive_logs(target)
        print(f"ray logs of {cluster.session_dir}: {saved} ({saved.stat().st_size if saved else 0} bytes)", flush=True)
    except Exception as e:
        print(f"ray logs of {cluster.session_dir} not saved: {type(e).__name__}: {e}", flush=True)


def _state_or_error(url: str | None) -> dict[str, Any]:
    try:
        return {"state": placement_run.query_state(url)} if url else {}
    except Exception as e:  # the check then falls back to the state after the run
        return {"error": f"{type(e).__name__}: {e}"}


def _check(state: dict[str, Any], watch: Any) -> dict[str, Any]:
    samples = (watch.gpu_mib_by_pid, watch.parents) if watch.samples else (None, None)
    return placement_check.check(state["nodes"], state["actors"], state["placement_groups"], *samples).summary()


def vllm_model_info_dir(environ: Mapping[str, str]) -> Path:
    """Pure: where vLLM 0.24 keeps its model-class inspections: vllm/envs.py's VLLM_CACHE_ROOT (default
    $XDG_CACHE_HOME/vllm, and that ~/.cache), + modelinfos."""
    cache_home = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    root = environ.get("VLLM_CACHE_ROOT") or str(Path(cache_home) / "vllm")
    return Path(root).expanduser() / "modelinfos"


def run_timed(
    specs: Sequence[run_grpo.RunSpec], paths: run_grpo.Paths, out: Path, fresh_model_info: bool = False
) -> list[run_grpo.RunResult]:
    """Timed runs, one after the other and alone on the machine; each saved as soon as it ends.
    fresh_model_info: vLLM's model-class cache is removed before each run, as a new trainer pod has none
    (grpo_trainer.startup.vllm_model_info), so that every run starts as a fresh machine's first run does there."""
    results = []
    for spec in specs:
        if fresh_model_info:
            shutil.rmtree(vllm_model_info_dir(os.environ), ignore_errors=True)
        result = run_grpo.run(spec, paths, alone=True)
        result.versions = run_grpo.versions()
        run_grpo.save_result(result, paths, out)
        results.append(result)
    return results


def learning_verdict(learn: run_grpo.RunResult, control: run_grpo.RunResult) -> learning.Verdict:
    return learning.judge_runs(run_grpo.steps_of(learn.steps), run_grpo.steps_of(control.steps))


# ----------------------------------------------------------------------------------------------- setup


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def setup(chunks: Path, site: Path, out: Path) -> dict[str, Any]:
    """Reassemble the wheel tar from its chunks, check it, install it with --target, compile it."""
    started = time.monotonic()
    parts = sorted(chunks.glob("wheels.tar.part-*"))
    expected = (chunks / "wheels.tar.sha256").read_text().split()[0]
    tar = chunks / "wheels.tar"
    with tar.open("wb") as dst:
        for part in parts:
            dst.write(part.read_bytes())
    got = sha256(tar)
    if got != expected:
        raise SystemExit(f"wheels.tar from {len(parts)} chunks: sha256 {got} != {expected}")
    wheels = chunks / "wheels"
    with tarfile.open(tar) as t:
        t.extractall(wheels, filter="data")
    site.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    subprocess.run([*pip, "--target", str(site), *map(str, sorted(wheels.rglob("*.whl")))], check=True)
    installed = time.monotonic()
    # The image's own packages come with .pyc files (pip compiles); without them every process of the
    # first run compiles the same modules at once, a first-run penalty the image does not have.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site)], check=False, capture_output=True)
    report = {
        "chunks": len(parts),
        "sha256": got,
        "wheels": len(list(wheels.rglob("*.whl"))),
        "install_s": round(installed - started, 1),
        "compile_s": round(time.monotonic() - installed, 1),
        "nvidia_smi": subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,memory.used,clocks.sm,temperature.gpu,power.draw",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "setup.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return report


# ------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Call:
    name: str
    what: str
    expected_s: int  # device seconds, the call's transfers and the machine start included
    if_it_fails: str
    in_budget: bool = True


# Figures: session b (bench/gpu/RESULTS.md): machine start ~89 s, a chunk call 0.2-0.4 s plus ~5 s of
# transfer, install 20 s, a warm run ~215-240 s to its first step and ~5.5 s a step after it.
PLAN: tuple[Call, ...] = (
    Call("1", "machine start; wheel chunk 1 to /tmp/chunks; nvidia-smi", 95, "stop: nothing else can run"),
    *(
        Call(str(i), f"wheel chunk {i} to /tmp/chunks", 6, "send the chunk once more (only transfers are retried)")
        for i in range(2, 8)
    ),
    Call(
        "8",
        "chunk 8; setup (reassemble, sha256, pip install --target, compileall); then the unmeasured batch at the "
        "same time: learn (lr 1e-3) + control (lr 0), 30 steps each, placement with the reward model on a 3-node "
        "Ray cluster (10 steps), smoke (10 steps, export, generation): `pytest -m gpu tests/gpu`, each run stopped "
        "at 370 s (clusters start and stop around that: ~60 s)",
        70 + 430,
        "a failed run fails its tests and is reported; the pairs still run (skip, no retry)",
    ),
    Call(
        "9", "pair 1, timed, alone: ours then stock, each stopped at 270 s of wall time", 560, "report what came back"
    ),
    Call("10", "pair 2, timed, alone: stock then ours, each stopped at 270 s (ABBA)", 560, "report what came back"),
    Call("a", "slot (a), issue 16: bench/fit/measure.py (memory-fit measurements, writes a JSON)", 310, "skip", False),
    Call(
        "b",
        "slot (b), issue 18: the 3 guardrail runs at the same time, 30 steps each, every step's metrics",
        540,
        "skip",
        False,
    ),
)
BUDGET_S = 1800


def plan_table(plan: Sequence[Call] = PLAN, budget_s: int = BUDGET_S) -> str:
    """Pure: the budget plan as a markdown table with the running total."""
    lines = [
        "| call | what | expected device s | running total (s) | if it fails |",
        "|---|---|---:|---:|---|",
    ]
    total = 0
    for c in plan:
        if c.in_budget:
            total += c.expected_s
            running = str(total)
        else:
            running = f"+{c.expected_s} (not in this session's budget)"
        lines.append(f"| {c.name} | {c.what} | {c.expected_s} | {running} | {c.if_it_fails} |")
    lines.append(f"| | **total of the calls in budget** | **{total}** | of {budget_s} | margin {budget_s - total} s |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- bundling


def bundle(results: Path, out: Path, call: str, summary: dict[str, Any]) -> list[Path]:
    """Everything of the call under results -> out/<call>.tar.gz, plus out/<call>.json: 2 files back."""
    out.mkdir(parents=True, exist_ok=True)
    tar = out / f"{call}.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for f in sorted(results.rglob("*")):
            if f.is_file() and f != tar:
                t.add(f, arcname=str(f.relative_to(results)))
    summary_file = out / f"{call}.json"
    summary_file.write_text(json.dumps(summary, indent=1, default=str))
    return [tar, summary_file]


def result_summary(result: run_grpo.RunResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "rc": result.rc,
        "timed_out": result.timed_out,
        "steps": len(result.steps),
        "first_step_at_s": result.first_step_at_s,
        "mean_step_s": result.mean_step_s,
        "median_step_s": result.median_step_s,
        "startup": result.startup,
        "io": result.io,
    }


# ------------------------------------------------------------------------------------------------ CLI


def call_unmeasured(work: Path, out: Path, extra: Sequence[str]) -> int:
    """`pytest -m gpu tests/gpu`: its session fixture runs the unmeasured batch (tests/gpu/conftest.py)."""
    results = out / "unmeasured"
    env = {
        **os.environ,
        "GRPO_GPU_OUT": str(results),
        "GRPO_GPU_WORK": str(work),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        str(ROOT / "tests" / "gpu"),
        f"--confcutdir={ROOT / 'tests' / 'gpu'}",
    ]
    cmd += ["-p", "no:cacheprovider", "-v", "-s", *extra]
    results.mkdir(parents=True, exist_ok=True)
    with (results / "pytest.log").open("w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            print(line, end="", flush=True)
        rc = proc.wait()
    summary = {"pytest_rc": rc, "runs": _summaries(results)}
    if (results / "learn.json").exists() and (results / "control.json").exists():
        summary["learning"] = learning_verdict(
            _load(results / "learn.json"), _load(results / "control.json")
        ).describe()
    bundle(results, out, "unmeasured", summary)
    return rc


def call_pair(
    order: Sequence[str],
    wall_cap_s: float,
    work: Path,
    out: Path,
    variants: Sequence[str] = (),
    fresh_model_info: bool = False,
) -> int:
    results = out / "pair"
    specs = timed_pair(order, wall_cap_s, dict(map(parse_variant, variants)))
    timed = run_timed(specs, run_grpo.Paths(work), results, fresh_model_info)
    summary: dict[str, Any] = {
        "order": list(order),
        "fresh_model_info": fresh_model_info,
        "env": {s.name: dict(s.env) for s in specs if s.env},
        "runs": {r.run: result_summary(r) for r in timed},
    }
    by_name = {r.run: r for r in timed}
    baseline = next((b for b in STOCK_RUNS if b in by_name and by_name[b].steps), None)
    if "ours" in by_name and by_name["ours"].steps and baseline:
        summary["report"] = run_grpo.report(results / "ours.json", results / f"{baseline}.json")
    logs = {r.run: results / f"{r.run}.log.gz" for r in timed}
    if any(r.steps for r in timed):  # the start-up table of every run, variants of ours included
        summary["startup"] = run_grpo.startup_report({k: p for k, p in logs.items() if p.exists()})
    bundle(results, out, "pair-" + "-".join(order), summary)
    return 0 if all(r.ok for r in timed) else 1


def call_batch(batch: list[BatchRun], work: Path, out: Path, name: str) -> int:
    results = out / name
    outcomes = run_batch(batch, run_grpo.Paths(work), results)
    summary = {
        n: {"error": o.error, **(result_summary(o.result) if o.result else {}), "placement": o.placement}
        for n, o in outcomes.items()
    }
    bundle(results, out, name, summary)
    return 0 if all(o.result is not None and o.result.ok for o in outcomes.values()) else 1


def call_fit(out: Path, timeout_s: float) -> int:
    """Slot (a): issue 16's memory-fit measurements, whatever bench/fit/measure.py is at this commit."""
    script = ROOT / "bench" / "fit" / "measure.py"
    results = out / "fit"
    results.mkdir(parents=True, exist_ok=True)
    if not script.exists():
        bundle(results, out, "fit", {"error": f"{script.relative_to(ROOT)} is not in this checkout"})
        return 2
    cmd = [sys.executable, str(script), "--out", str(results / "fit.json")]
    with (results / "fit.log").open("w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    bundle(results, out, "fit", {"command": cmd, "rc": rc})
    return rc


def _load(path: Path) -> run_grpo.RunResult:
    data = json.loads(path.read_text())
    fields = {f.name for f in dataclasses.fields(run_grpo.RunResult)}
    return run_grpo.RunResult(**{k: v for k, v in data.items() if k in fields})


def _summaries(results: Path) -> dict[str, Any]:
    return {
        f.stem: result_summary(_load(f))
        for f in sorted(results.glob("*.json"))
        if not f.name.endswith((".outcome.json", "-state.json")) and f.name != "gpuwatch.json"
    }


def report(paths: Sequence[Path]) -> str:
    """Here, after the session: the tables of RESULTS.md from result folders (unpacked bundles)."""
    found = {p.name: p for folder in paths for p in Path(folder).rglob("*.json")}
    lines = []
    if "learn.json" in found and "control.json" in found:
        lines += [
            "## Learning against the control",
            "",
            learning_verdict(_load(found["learn.json"]), _load(found["control.json"])).describe(),
            "",
        ]
    logs = {p.name.split(".")[0]: p for folder in paths for p in Path(folder).rglob("*.log.gz") if "-" not in p.name}
    if logs:
        lines += ["## Start-up", "", run_grpo.startup_report(logs), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("plan")
    s = sub.add_parser("setup")
    s.add_argument("--chunks", type=Path, required=True)
    s.add_argument("--site", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("call")
    calls = ("unmeasured", "pair", "fit", "guardrails", "placement-guardrails", "guard-act", "guard-resume",
             "guard-collapse")
    c.add_argument("which", choices=calls)
    c.add_argument("--work", type=Path, default=Path("/tmp/gpuw/work"))
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--order", default="ours,stock", help="pair: runs in order: ours, stock or a variant of ours "
                   f"({', '.join(VARIANTS)} or one of --variant)")
    c.add_argument("--variant", action="append", default=[], metavar="NAME:ENV=VALUE,...",
                   help="pair: one more variant of ours, e.g. ours_nouni:GRPO_VLLM_UNI=0")
    c.add_argument("--wall-cap", type=float, default=270.0, help="pair: seconds each timed run may take")
    c.add_argument("--fresh-model-info", action="store_true",
                   help="pair: remove vLLM's model-class cache before each run, as a new trainer pod has none")
    c.add_argument("--timeout", type=float, default=300.0, help="fit: seconds the slot may take")
    c.add_argument(
        "--run", action="append", default=[], help="guardrails: NAME:key=value,... (lr, reward, temperature, steps)"
    )
    c.add_argument("pytest_args", nargs="*", help="unmeasured: more pytest arguments (e.g. -k learn)")
    r = sub.add_parser("report")
    r.add_argument("folders", nargs="+", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "plan":
        print(plan_table())
        return 0
    if a.cmd == "setup":
        setup(a.chunks, a.site, a.out)
        return 0
    if a.cmd == "report":
        print(report(a.folders))
        return 0
    if a.which == "unmeasured":
        return call_unmeasured(a.work, a.out, a.pytest_args)
    if a.which == "pair":
        return call_pair(a.order.split(","), a.wall_cap, a.work, a.out, a.variant, a.fresh_model_info)
    if a.which == "fit":
        return call_fit(a.out, a.timeout)
    if a.which == "guard-act":
        return call_batch(guard_act_batch(a.wall_cap), a.work, a.out, a.which)
    if a.which == "guard-collapse":
        return call_batch([guard_collapse_run(a.wall_cap)], a.work, a.out, a.which)
    if a.which == "guard-resume":
        return call_batch(guard_resume_batch(a.wall_cap), a.work, a.out, a.which)
    guard = guardrail_batch(a.run or GUARDRAILS, cap_s=a.wall_cap)
    if a.which == "placement-guardrails":  # issue 17.2's run beside issue 18's: four runs, as in the batch before
        return call_batch([placement_batch_run(a.wall_cap, metrics_port=9403), *guard], a.work, a.out, a.which)
    return call_batch(guard, a.work, a.out, "guardrails")


if __name__ == "__main__":  # vLLM's engine process re-imports __main__: never run twice
    sys.exit(main())
