"""`grpo-train --config_path FILE [--dry-run] [key=value ...]`: verl 0.9.1's main_ppo with our features."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml
from omegaconf import OmegaConf

from grpo_trainer.config import BuiltConfig, build_config
from grpo_trainer.errors import DataPrepError, GrpoConfigError
from grpo_trainer.startup import ray_start
from grpo_trainer.startup.task_runner import WARM_START_ENV, EarlyTaskRunner, preload_plan
from grpo_trainer.startup.transfer_queue_start import ONE_ROUND_ENV, start_transfer_queue, stop_transfer_queue
from grpo_trainer.startup.vllm_model_info import start_model_info
from grpo_trainer.verl_validation import validate_with_verl

log = logging.getLogger("grpo_trainer")

# Ray gives the head node this resource; asking for a sliver of it keeps the TaskRunner (and with it
# the Tracking backend that serves /metrics) on the head pod, where the operator's PodMonitor looks.
HEAD_NODE_RESOURCE = "node:__internal_head__"
# start-up lines a user can grep for (and the GPU bench's start-up breakdown reads)
PHASE_PREFIX = "grpo-train: "
# "0": the warm load balancer does not import the rollout server's module early (grpo_trainer.startup.task_runner)
WARM_SERVER_IMPORT_ENV = "GRPO_WARM_SERVER_IMPORT"
# "0": verl starts the rollout's vLLM servers after the model load (grpo_trainer.startup.rollout_server)
EARLY_ROLLOUT_SERVERS_ENV = "GRPO_EARLY_ROLLOUT_SERVERS"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="grpo-train", description=__doc__)
    p.add_argument(
        "--config_path",
        "--config-path",
        dest="config_path",
        required=True,
        help="verl.yaml rendered by the operator (docs/config-contract.md)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the merged verl config and the resolved GRPO values, then exit without Ray",
    )
    p.add_argument(
        "--preflight",
        action="store_true",
        help="check the job before it takes a GPU (config, verl's checks, model, data, reward, checkpoints, "
        "memory fit); print the verdict JSON, write it to --termination-log, exit 1 if a check failed",
    )
    p.add_argument(
        "--rehearsal",
        action="store_true",
        help="in the job's Ray cluster: the preflight's checks, then every pool placed on its role's nodes, "
        "GPUs per role and the shared checkpoint directory probed; print the verdict, patch it into the "
        "GRPOJob's status.rehearsal, exit 1 if a check failed. Nothing is trained",
    )
    p.add_argument(
        "--gpu-memory",
        action="append",
        default=[],
        metavar="ROLE=BYTES",
        help="GPU memory of a pool for --preflight's memory fit, e.g. actor=85899345920 or rollout=80Gi",
    )
    p.add_argument(
        "--new-checkpoint-claim",
        type=_claim_size,
        default=None,
        metavar="BYTES|auto",
        help="--preflight: the checkpoint claim is new and not mounted here (it binds where the actor runs): its "
        "size is checked against the model's checkpoints instead of the free space of a mount; auto: the verdict "
        "says the size to create it with (checkpointClaimBytes)",
    )
    p.add_argument(
        "--termination-log",
        default=TERMINATION_LOG,
        help="where --preflight writes its verdict (at most 4096 bytes, as Kubernetes keeps)",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="verl keys (or grpo.* settings) applied after the file, e.g. trainer.total_epochs=1",
    )
    return p.parse_args(argv)


TERMINATION_LOG = "/dev/termination-log"
_MEMORY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _claim_size(text: str) -> int:
    """--new-checkpoint-claim: bytes, or auto (0: the operator sizes the claim from the verdict)."""
    if text == "auto":
        return 0
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive number of bytes, or auto")
    return value


def parse_gpu_memory(items: list[str]) -> dict[str, int]:
    """["actor=80Gi", "rollout=85899345920"] -> bytes by pool."""
    memory: dict[str, int] = {}
    for item in items:
        role, sep, amount = item.partition("=")
        if not sep or role not in ("actor", "rollout", "reward"):
            raise GrpoConfigError(f"--gpu-memory {item!r}: expected ROLE=BYTES with ROLE actor, rollout or reward")
        factor = next((f for suffix, f in _MEMORY_SUFFIXES.items() if amount.endswith(suffix)), 1)
        number = amount[:-2] if factor != 1 else amount
        try:
            memory[role] = int(float(number) * factor)
        except ValueError as e:
            raise GrpoConfigError(f"--gpu-memory {item!r}: {number!r} is not a number") from e
    return memory


def run_preflight_command(args: argparse.Namespace) -> int:
    """`grpo-train --preflight`: the verdict to stdout and the termination log; 0 passed, 1 failed."""
    from grpo_trainer.preflight import PreflightOptions, preflight_config_file, write_termination_message

    options = PreflightOptions(gpu_memory=parse_gpu_memory(args.gpu_memory),
                               new_checkpoint_claim_bytes=args.new_checkpoint_claim)
    with contextlib.redirect_stdout(sys.stderr):  # verl prints; stdout carries the verdict alone
        verdict = preflight_config_file(args.config_path, args.overrides, options)
    for check in verdict.checks:
        log.log(logging.INFO if check.ok else logging.ERROR, "%s %s [%s] %s%s", "ok  " if check.ok else "FAIL",
                check.name, check.field, check.message, f" -> {check.fix}" if not check.ok and check.fix else "")
    sys.stdout.write(verdict.to_json() + "\n")
    try:
        write_termination_message(verdict, args.termination_log)
    except OSError as e:
        log.warning("cannot write the verdict to %s: %s", args.termination_log, e)
    return 0 if verdict.passed else 1


def run_rehearsal(args: argparse.Namespace) -> int:
    """`grpo-train --rehearsal`: the verdict's lines on stdout (the last is the RayJob's message)."""
    from grpo_trainer.preflight import PreflightOptions
    from grpo_trainer.rehearsal.run import run_rehearsal_command

    options = PreflightOptions(gpu_memory=parse_gpu_memory(args.gpu_memory))
    return run_rehearsal_command(args.config_path, args.overrides, options, os.environ)


MERGED_HEADER = "# merged verl 0.9.1 config\n"
SUMMARY_HEADER = "# resolved GRPO values\n"


def render_dry_run(built: BuiltConfig) -> str:
    merged = OmegaConf.to_yaml(built.verl, resolve=False)
    summary = yaml.safe_dump(built.summary(), sort_keys=False)
    return f"{MERGED_HEADER}{merged}\n{SUMMARY_HEADER}{summary}"


def parse_dry_run(output: str) -> tuple[dict, dict]:
    """(merged verl config, resolved GRPO values) from `--dry-run`'s output: what scripts and CI checks read."""
    # verl may print its own lines before ours: the merged config starts at its header.
    start = output.find(MERGED_HEADER)
    if start < 0 or SUMMARY_HEADER not in output[start:]:
        raise ValueError("not grpo-train --dry-run output: no merged verl config header")
    merged, summary = output[start + len(MERGED_HEADER) :].split(SUMMARY_HEADER, 1)
    return yaml.safe_load(merged) or {}, yaml.safe_load(summary) or {}


def prepare_data(built: BuiltConfig) -> None:
    if built.data_plan is None:
        return
    from transformers import AutoTokenizer

    from grpo_trainer.data_prep import chat_token_counter, execute_plan

    model = built.verl.actor_rollout_ref.model
    tokenizer = AutoTokenizer.from_pretrained(
        str(model.get("tokenizer_path") or model.path), trust_remote_code=bool(model.get("trust_remote_code"))
    )
    execute_plan(
        built.data_plan,
        chat_token_counter(tokenizer),
        int(built.verl.data.max_prompt_length),
        built.settings.data.oversize,
    )


def task_runner_class(config: Any, before_run: Callable[[], None] = lambda: None) -> EarlyTaskRunner:
    """verl's TaskRunner for this config, created as soon as Ray is up; `before_run` (the data
    preparation) then runs in the driver while the actor starts (grpo_trainer.startup.task_runner)."""
    # num_cpus=1 is Ray's scheduling default for actors, made explicit: the head group must offer it
    options = {"num_cpus": 1, "resources": {HEAD_NODE_RESOURCE: 0.001}}
    # "0": verl's own start-up order (grpo_trainer.startup.task_runner)
    warm = os.environ.get(WARM_START_ENV, "1") != "0"

    def start_model_info_beside() -> None:
        if warm:  # vLLM's model-class inspection, before a server needs it (grpo_trainer.startup.vllm_model_info)
            start_model_info(config, os.environ)

    if config.trainer.use_v1:
        from grpo_trainer.startup.task_runner_host import GrpoTaskRunnerActor

        plan = preload_plan(config)
        if not warm:
            plan = dataclasses.replace(
                plan, transfer_queue_early=False, agent_loop_workers=0, early_servers=None,
                early_servers_skipped=f"{WARM_START_ENV}=0",
            )
        if os.environ.get(WARM_SERVER_IMPORT_ENV, "1") == "0":
            plan = dataclasses.replace(plan, warm_server_import=False)
        if os.environ.get(EARLY_ROLLOUT_SERVERS_ENV, "1") == "0":
            plan = dataclasses.replace(plan, early_servers=None, early_servers_skipped=f"{EARLY_ROLLOUT_SERVERS_ENV}=0")

        def start_beside() -> None:
            # the actor exists: TransferQueue's processes start beside its process
            # (grpo_trainer.startup.transfer_queue_start), from the head node, as they did from the driver; its
            # starter only waits, so it takes no CPU
            if plan.transfer_queue is not None and plan.transfer_queue_early:
                one_round = os.environ.get(ONE_ROUND_ENV, "1") != "0"
                start_transfer_queue(plan.transfer_queue, {**options, "num_cpus": 0}, one_round)
            start_model_info_beside()

        return EarlyTaskRunner(GrpoTaskRunnerActor, options, (plan,), before_run, start_beside)
    from verl.trainer.main_ppo_v0 import TaskRunner

    return EarlyTaskRunner(TaskRunner, options, (), before_run, start_model_info_beside)


def validate_with_verl_timed(config: Any) -> None:
    """validate_with_verl, and the time it took (it imports verl: most of the driver's start-up)."""
    started = time.monotonic()
    validate_with_verl(config)
    log.info("%sconfig validated by verl in %.1f s", PHASE_PREFIX, time.monotonic() - started)


def run(built: BuiltConfig) -> None:
    """verl's main_ppo on our config. Ray and the TaskRunner start first where they can
    (grpo_trainer.startup.ray_start), then the driver imports verl and validates the config (validate_with_verl)
    while the TaskRunner's process starts; the data is prepared once the actor exists, not before
    (grpo_trainer.startup.task_runner). Our extensions are installed here in the driver and, through the
    runtime_env's worker_process_setup_hook, in every Ray worker."""

    def before_run() -> None:
        started = time.monotonic()
        prepare_data(built)
        log.info("%sdata prepared in %.1f s, while the task runner starts", PHASE_PREFIX, time.monotonic() - started)

    runner = task_runner_class(built.verl, before_run)
    early = ray_start.start(built.verl, runner, os.environ)
    try:
        validate_with_verl_timed(built.verl)
        early = ray_start.confirm(early, built.verl)
        from verl.trainer.main_ppo import run_ppo

        from grpo_trainer.worker_setup import setup_worker
    except BaseException:
        # a config verl rejects, verl failing to import: nothing of the run is left behind
        ray_start.give_up(early)
        raise
    try:
        setup_worker()  # the driver creates no pools itself, but keeps the same code patched here too
        run_ppo(built.verl, task_runner_class=runner)
    finally:
        stop_transfer_queue()


def show_our_info_logs() -> None:
    """Our INFO lines (start-up times, pinned pools) even where importing verl has set the root logger to
    WARNING first (verl's __init__ calls logging.basicConfig), which makes basicConfig here a no-op."""
    logging.getLogger("grpo_trainer").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    show_our_info_logs()
    args = parse_args(argv)
    try:
        if args.preflight and args.rehearsal:
            raise GrpoConfigError("--preflight and --rehearsal exclude each other: the rehearsal runs the "
                                  "preflight's checks itself, in the Ray cluster")
        if args.preflight:
            return run_preflight_command(args)
        if args.rehearsal:
            return run_rehearsal(args)
        started = time.monotonic()
        built = build_config(args.config_path, args.overrides, strict=not args.dry_run)
        log.info("%sconfig built in %.1f s", PHASE_PREFIX, time.monotonic() - started)
        if args.dry_run:
            validate_with_verl_timed(built.verl)
            sys.stdout.write(render_dry_run(built))
            return 0
        run(built)  # validates with verl once Ray and the TaskRunner are starting
    except (GrpoConfigError, DataPrepError) as e:
        print(f"grpo-train: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # vLLM's spawned engine re-imports __main__: never run twice
    sys.exit(main())
