"""`grpo-train --rehearsal`: the job's real entrypoint up to the point of training, then a verdict.

In the job's Ray cluster (the RayJob runs it like training): every preflight check (grpo_trainer.preflight:
config built and checked by verl, model config and tokenizer, data, reward function called on real rows,
checkpoint directory, memory fit) on the pods' real mounts, then what only the live cluster can show
(live.py: verl's pools placed on their roles' pods, GPUs per role, one checkpoint volume for driver and
actors). The verdict is printed, patched into the GRPOJob's `status.rehearsal` (the operator turns it
into the `Rehearsal` condition), and decides the exit code, so a failed rehearsal fails the RayJob with
the failing checks as its message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from grpo_trainer.preflight import PreflightOptions, Verdict, preflight_config_file
from grpo_trainer.preflight.verdict import Check

log = logging.getLogger(__name__)

# status.rehearsal keeps the checks' text short: the GRPOJob is read by people, the logs keep the rest.
STATUS_TEXT_LIMIT = 300


def rehearse(config_path: str, overrides: list[str], options: PreflightOptions,
             ray_address: str | None = None, timeout_s: float = 120.0) -> Verdict:
    from grpo_trainer.config import build_config
    from grpo_trainer.rehearsal.live import place_and_probe
    from grpo_trainer.rehearsal.pools import verl_pools

    verdict = preflight_config_file(config_path, overrides, options)
    if any(c.name.startswith("config.") or c.name == "verl.keys" for c in verdict.failures):
        return verdict  # no config to place: the preflight's failure says why
    built = build_config(config_path, overrides, strict=False)
    import ray

    if not ray.is_initialized():
        ray.init(address=ray_address, log_to_driver=False)
    try:
        live, _ = place_and_probe(verl_pools(built.verl), dict(built.settings.placement.role_resources),
                                  str(built.verl.trainer.default_local_dir), timeout_s)
    except Exception as e:  # the cluster misbehaved: fail the rehearsal saying how, not with a traceback only
        log.exception("the live checks failed")
        live = [Check("ray.cluster", "spec.placement", False, f"{type(e).__name__}: {e}", "",
                      "see the driver's log (the RayJob's submitter pod)")]
    return Verdict((*verdict.checks, *live))


def summary_lines(verdict: Verdict) -> list[str]:
    """Pure: what the driver prints; the last line is the one KubeRay keeps as the RayJob's message."""
    lines = [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.message}" + (f" (fix: {c.fix})" if c.fix else "")
             for c in verdict.checks]
    failed = [f"{c.field or c.name}: {c.message}" for c in verdict.failures]
    tail = "rehearsal PASSED" if verdict.passed else "rehearsal FAILED: " + "; ".join(failed)
    return [*lines, tail]


def build_rehearsal_patch(verdict: Verdict, now: datetime) -> dict[str, Any]:
    """Pure: the merge patch body for `status.rehearsal` (texts shortened for `kubectl get -o yaml`)."""

    def short(text: str) -> str:
        return text if len(text) <= STATUS_TEXT_LIMIT else text[: STATUS_TEXT_LIMIT - 1] + "…"

    checks = [{"name": c.name, "field": c.field, "ok": c.ok, "message": short(c.message),
               **({"fix": short(c.fix)} if c.fix else {})} for c in verdict.checks]
    return {"status": {"rehearsal": {"passed": verdict.passed, "checks": checks,
                                     "finishedAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}}


def run_rehearsal_command(config_path: str, overrides: list[str], options: PreflightOptions,
                          environ: Mapping[str, str]) -> int:
    verdict = rehearse(config_path, overrides, options)
    for line in summary_lines(verdict):
        print(line, flush=True)
    name, namespace = environ.get("GRPO_JOB_NAME"), environ.get("GRPO_JOB_NAMESPACE")
    if name and namespace:
        from grpo_trainer.progress.status import StatusReporter

        StatusReporter(namespace, name).patch(build_rehearsal_patch(verdict, datetime.now(UTC)), "rehearsal")
    return 0 if verdict.passed else 1
