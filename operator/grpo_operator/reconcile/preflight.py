"""The preflight Job into the GRPOJob's status: pure decisions.

The Job's pod ends with the verdict JSON as its termination message ({"passed", "checks": [{name,
field, value, ok, message, fix}]}, grpo_trainer/preflight/verdict.py). A pod that died before writing
one leaves its log's last lines instead (FallbackToLogsOnError), or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from grpo_operator.reconcile.status import ConditionUpdate

State = Literal["running", "passed", "failed"]
# Phases in which a preflight verdict can still change the job: no RayJob exists yet.
GATED_PHASES = ("Preflight", "Invalid")
# Failed checks shown in the condition's message; all of them are in status.preflight.failures.
MESSAGE_FAILURES = 3
_CHECK_KEYS = ("name", "field", "value", "message", "fix")


@dataclass(frozen=True)
class Outcome:
    state: State
    message: str
    failures: tuple[dict[str, str], ...] = field(default_factory=tuple)
    # The size the preflight chose for the new checkpoint claim (spec.checkpoints.volume.size empty).
    checkpoint_claim_bytes: int | None = None
    # What it sized (the verdict's `sizing`: reconcile/sizing.py), carried to the RayJob's creation so the verdict is
    # not read from the pod a second time.
    sizing: Mapping[str, Any] | None = None

    @property
    def field(self) -> str:
        """The first failed check's field: the one to fix first."""
        return self.failures[0].get("field", "") if self.failures else ""


def _job_conditions(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if c.get("status") == "True"}


def _failure_text(check: Mapping[str, str]) -> str:
    text = f"{check.get('field') or 'spec'}: {check.get('message', '')}"
    if check.get("value"):
        text += f" (found: {check['value']})"
    if check.get("fix"):
        text += f"; fix: {check['fix']}"
    return text


def running(job_name: str) -> Outcome:
    return Outcome("running", f"preflight Job {job_name} is checking the model, data, reward and memory fit")


def outcome(job: Mapping[str, Any], result: Mapping[str, Any] | None) -> Outcome:
    """What a preflight Job says; `result` is its pod's termination message (JSON, or {"message": text})."""
    name = (job.get("metadata") or {}).get("name", "the preflight Job")
    done = _job_conditions(job)
    if "Complete" not in done and "Failed" not in done:
        return running(name)
    checks = (result or {}).get("checks")
    if isinstance(checks, list):
        failed = tuple({k: str(c.get(k) or "") for k in _CHECK_KEYS} for c in checks if not c.get("ok"))
        if "Complete" in done and result.get("passed") is True and not failed:
            sized = result.get("checkpointClaimBytes")
            knobs = result.get("sizing")
            return Outcome("passed", f"preflight Job {name}: {len(checks)} checks passed",
                           checkpoint_claim_bytes=sized if isinstance(sized, int) and sized > 0 else None,
                           sizing=knobs if isinstance(knobs, Mapping) else None)
        if failed:
            shown = "; ".join(_failure_text(c) for c in failed[:MESSAGE_FAILURES])
            more = f" (and {len(failed) - MESSAGE_FAILURES} more)" if len(failed) > MESSAGE_FAILURES else ""
            return Outcome("failed", f"preflight failed: {shown}{more}", failed)
    if "Failed" in done:
        condition = done["Failed"]
        if condition.get("reason") == "DeadlineExceeded":
            why = (f"it did not finish within spec.preflight.timeoutSeconds: its pod may never have started (a "
                   f"claim that does not bind, a missing PriorityClass, no node for placement.head; kubectl "
                   f"describe job {name}) or the checks took longer (raise the timeout)")
        else:
            why = ((result or {}).get("message") or condition.get("message") or condition.get("reason")
                   or "its pod failed")
        failure = {"name": "preflight.job", "field": "spec.preflight", "value": "", "message": str(why), "fix": ""}
        return Outcome("failed", f"preflight Job {name} failed without a verdict: {why}", (failure,))
    failure = {"name": "preflight.job", "field": "spec.preflight", "value": "",
               "message": "the preflight pod exited 0 but left no verdict", "fix": "check the trainer image"}
    return Outcome("failed", f"preflight Job {name} ended without a verdict", (failure,))


def conditions(result: Outcome) -> tuple[ConditionUpdate, ...]:
    """The Preflight condition, and Ready (and Valid for a failure) to go with it."""
    if result.state == "running":
        return (ConditionUpdate("Preflight", "Unknown", "Running", result.message),
                ConditionUpdate("Ready", "False", "PreflightRunning", result.message))
    if result.state == "passed":
        return (ConditionUpdate("Preflight", "True", "Passed", result.message),)
    return (ConditionUpdate("Preflight", "False", "Failed", result.message),
            ConditionUpdate("Valid", "False", "PreflightFailed", result.message),
            ConditionUpdate("Ready", "False", "PreflightFailed", result.message))


def disabled_condition() -> ConditionUpdate:
    return ConditionUpdate("Preflight", "Unknown", "Disabled",
                           "spec.preflight.enabled is false: nothing was checked before the RayJob")


def preflight_status(job_name: str, digest: str, result: Outcome | None) -> dict[str, Any]:
    """status.preflight: which Job, for which digest, and its verdict once there is one."""
    status: dict[str, Any] = {"jobName": job_name, "digest": digest, "passed": None, "failures": []}
    if result is not None and result.state != "running":
        status["passed"] = result.state == "passed"
        status["failures"] = [dict(f) for f in result.failures]
        if result.checkpoint_claim_bytes is not None:
            status["checkpointClaimSize"] = f"{-(-result.checkpoint_claim_bytes // 2**30)}Gi"
    return status


def expects(status: Mapping[str, Any], job: Mapping[str, Any] | None, digest_of: Any) -> bool:
    """Does this Job check the spec the GRPOJob's status expects a verdict for?"""
    wanted = (status.get("preflight") or {}).get("digest")
    return job is not None and wanted is not None and digest_of(job) == wanted


def awaited(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """status.preflight when the job waits on that preflight's verdict: not being deleted, no RayJob yet,
    no edit pending (an edit is rendered afresh, with a new Job, before any verdict counts)."""
    meta, status = job.get("metadata") or {}, job.get("status") or {}
    wanted = status.get("preflight") or {}
    if (meta.get("deletionTimestamp") or status.get("phase") not in GATED_PHASES or not wanted.get("digest")
            or meta.get("generation") != status.get("observedGeneration")):
        return None
    return wanted


def verdict_stands(status: Mapping[str, Any], digest: str, job_recreated: bool) -> bool:
    """An edit that changed nothing the preflight checks keeps the verdict of the Job that is there."""
    same = (status.get("preflight") or {}).get("digest") == digest
    return same and status.get("phase") in GATED_PHASES and not job_recreated
