"""Pure mapping from what the children report to the GRPOJob's phase and conditions.

Handlers read the RayJob and the converter Job, call `observe`, and patch the result; nothing here
talks to the API, so every transition is a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# KubeRay's RayJob.status.jobDeploymentStatus values (ray.io/v1, KubeRay v1.5).
_PENDING = {"", "New", "Initializing", "Waiting"}
_SUSPENDED = {"Suspending", "Suspended"}


@dataclass(frozen=True)
class ConditionUpdate:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """What the GRPOJob's status should say now; None fields are left as they are."""

    phase: str
    ready: ConditionUpdate
    extra_conditions: tuple[ConditionUpdate, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    wants_export: bool = False
    finished: bool = False


def _ray_message(rayjob_status: dict) -> str:
    return rayjob_status.get("message") or ""


def observe_rayjob(name: str, rayjob: dict | None, export_enabled: bool, rehearsal: bool = False) -> Observation:
    """Phase and Ready condition from a RayJob; `wants_export` once it completed and export is on.

    `rehearsal`: the RayJob ran spec.rehearsal's checks, not training (its success says they passed).
    """
    if rayjob is None:
        return Observation(
            "Pending", ConditionUpdate("Ready", "False", "RayJobMissing", f"RayJob {name} does not exist yet")
        )
    status = rayjob.get("status") or {}
    deployment = status.get("jobDeploymentStatus", "")
    # KubeRay counts failed attempts; with backoffLimit each one is a restart that resumes.
    fields: dict[str, Any] = {"rayJobName": name, "restarts": int(status.get("failed") or 0)}
    if status.get("rayClusterName"):
        fields["rayClusterName"] = status["rayClusterName"]
    if status.get("startTime"):
        fields["startTime"] = status["startTime"]
    if deployment in _PENDING:
        cluster_state = (status.get("rayClusterStatus") or {}).get("state", "")
        detail = (
            f" (RayCluster {status.get('rayClusterName')} is {cluster_state or 'being created'})"
            if status.get("rayClusterName")
            else ""
        )
        return Observation(
            "Pending",
            ConditionUpdate(
                "Ready", "False", "RayJobInitializing", f"RayJob {name} is starting its Ray cluster{detail}"
            ),
            fields=fields,
        )
    if deployment in _SUSPENDED:
        return Observation(
            "Suspended",
            ConditionUpdate("Ready", "False", "RayJobSuspended", f"RayJob {name} is {deployment.lower()}"),
            fields=fields,
        )
    if deployment in ("Running", "Retrying"):
        retry = " (retrying after a failure; resumes from the latest checkpoint)" if deployment == "Retrying" else ""
        return Observation(
            "Running",
            ConditionUpdate("Ready", "True", "RayJobRunning", f"RayJob {name} is Running{retry}"),
            fields=fields,
        )
    if deployment == "Complete":
        if export_enabled:
            return Observation(
                "Exporting",
                ConditionUpdate("Ready", "True", "Exporting", f"RayJob {name} completed; exporting the model"),
                fields=fields,
                wants_export=True,
            )
        done = "completed: the rehearsal passed, nothing was trained" if rehearsal else "completed"
        return Observation(
            "Succeeded",
            ConditionUpdate("Ready", "False", "Succeeded", f"RayJob {name} {done}"),
            fields={**fields, "completionTime": _end_time(status)},
            finished=True,
        )
    if deployment in ("Failed", "ValidationFailed"):
        reason = status.get("reason") or ("ValidationFailed" if deployment == "ValidationFailed" else "RayJobFailed")
        message = _ray_message(status) or f"RayJob {name} failed"
        return Observation(
            "Failed",
            ConditionUpdate("Ready", "False", reason, f"RayJob {name} failed: {message}"),
            fields={**fields, "completionTime": _end_time(status)},
            finished=True,
        )
    return Observation(
        "Pending",
        ConditionUpdate("Ready", "Unknown", "UnknownRayJobState", f"RayJob {name} reports {deployment!r}"),
        fields=fields,
    )


def rehearsal_condition(rehearsal: dict | None) -> ConditionUpdate | None:
    """The `Rehearsal` condition from the verdict the trainer wrote into status.rehearsal (None: none yet)."""
    if not rehearsal or "passed" not in rehearsal:
        return None
    checks = rehearsal.get("checks") or []
    if rehearsal["passed"]:
        return ConditionUpdate("Rehearsal", "True", "RehearsalPassed",
                               f"all {len(checks)} checks passed (status.rehearsal lists them)")
    failed = [c for c in checks if not c.get("ok")]
    detail = "; ".join(f"{c.get('field') or c.get('name')}: {c.get('message', '')}"
                       + (f" (fix: {c['fix']})" if c.get("fix") else "") for c in failed)
    return ConditionUpdate("Rehearsal", "False", "RehearsalFailed", f"{len(failed)} of {len(checks)} checks failed: "
                           f"{detail}")


def restart_condition(restarts: int, retries: int, checkpoint: dict | None) -> ConditionUpdate:
    """Says that a RayJob attempt failed and which checkpoint the next attempt resumes from.

    Computed when `restarts` grows, from the checkpoint the trainer last reported: with verl's
    resume_mode=auto on the same checkpoint directory, that is where the new attempt starts.
    """
    where = (
        f"resumes from checkpoint step {checkpoint['step']} ({checkpoint.get('path', '')})"
        if checkpoint and checkpoint.get("step") is not None
        else "no checkpoint was saved yet, so it starts from step 0"
    )
    return ConditionUpdate(
        "Restarted", "True", "RayJobRetried", f"attempt {restarts + 1} of {retries + 1} after a failure; {where}"
    )


def observe_export(name: str, job: dict | None, result: dict | None, target_path: str | None = None) -> Observation:
    """Phase from the converter Job; `result` is the converter's JSON termination message, if any.

    `target_path` (spec.export.target.path) stands in for the path when the converter left no message.
    """
    if job is None:
        return Observation(
            "Exporting",
            ConditionUpdate("Ready", "True", "Exporting", f"creating converter Job {name}"),
            fields={"exportJobName": name},
            wants_export=True,
        )
    conditions = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
    fields: dict[str, Any] = {"exportJobName": name}
    if conditions.get("Complete", {}).get("status") == "True":
        result = result or {}
        summary = {"path": target_path or result.get("path"), "step": result.get("step"),
                   "sizeBytes": result.get("sizeBytes")}
        if summary["path"] is not None:
            fields["export"] = {k: v for k, v in summary.items() if v is not None}
        fields["completionTime"] = conditions["Complete"].get("lastTransitionTime") or now()
        where = f" to {summary['path']}" if summary["path"] else ""
        return Observation(
            "Succeeded",
            ConditionUpdate("Ready", "False", "Succeeded", f"training and export finished; model written{where}"),
            extra_conditions=(
                ConditionUpdate("Exported", "True", "ConverterSucceeded", f"converter Job {name} succeeded{where}"),
            ),
            fields=fields,
            finished=True,
        )
    if conditions.get("Failed", {}).get("status") == "True":
        message = (result or {}).get("message") or conditions["Failed"].get("message") or "converter failed"
        fields["completionTime"] = conditions["Failed"].get("lastTransitionTime") or now()
        return Observation(
            "Failed",
            ConditionUpdate("Ready", "False", "ExportFailed", f"converter Job {name} failed: {message}"),
            extra_conditions=(ConditionUpdate("Exported", "False", "ConverterFailed", message),),
            fields=fields,
            finished=True,
        )
    return Observation(
        "Exporting", ConditionUpdate("Ready", "True", "Exporting", f"converter Job {name} is running"), fields=fields
    )


def _end_time(status: dict) -> str:
    return status.get("endTime") or now()


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    existing: list[dict], updates: tuple[ConditionUpdate, ...], generation: int | None, at: str | None = None
) -> list[dict]:
    """Kubernetes semantics: lastTransitionTime changes only when a condition's status changes."""
    at = at or now()
    merged = {c["type"]: dict(c) for c in existing}
    for update in updates:
        previous = merged.get(update.type)
        changed = previous is None or previous.get("status") != update.status
        merged[update.type] = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": at if changed else previous.get("lastTransitionTime", at),
            **({"observedGeneration": generation} if generation is not None else {}),
        }
    return list(merged.values())
