"""Pure mapping from what the children report to the GRPOJob's phase and conditions.

Handlers read the RayJob and the converter Job, call `observe`, and patch the result; nothing here
talks to the API, so every transition is a unit test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# KubeRay's RayJob.status.jobDeploymentStatus values (ray.io/v1, KubeRay v1.5).
_PENDING = {"", "New", "Initializing", "Waiting"}
_SUSPENDED = {"Suspending", "Suspended"}
# KubeRay labels the RayCluster a RayJob made with the RayJob's name (utils.RayOriginatedFromCRNameLabelKey).
RAY_ORIGIN_LABEL = "ray.io/originated-from-cr-name"
# KubeRay's submitter container (render/submitter.py); its log is the driver's output.
SUBMITTER_CONTAINER = "ray-job-submitter"


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
    # Written with the next write but no reason for one on their own (what KubeRay's Initializing adds).
    passive_fields: dict[str, Any] = field(default_factory=dict)
    wants_export: bool = False
    finished: bool = False
    # Training completed: the RayCluster, kept after a failure for its logs, may go at once.
    release_cluster: bool = False


def _ray_message(rayjob_status: dict) -> str:
    return rayjob_status.get("message") or ""


def restarts_of(rayjob_status: dict) -> int:
    """Retries KubeRay has started: its `failed` counts every failed attempt, the last one too.

    KubeRay v1.5 (rayjob_controller.go, checkBackoffLimitAndUpdateStatusIfNeeded) increments `failed`
    on each failure and moves to Retrying while failed < backoffLimit + 1. A RayJob that stays Failed
    was not retried after its last failure, so its restarts are one fewer than its failures.
    """
    failed = int(rayjob_status.get("failed") or 0)
    return max(failed - 1, 0) if rayjob_status.get("jobDeploymentStatus") == "Failed" else failed


def terminal_conditions(phase: str, message: str) -> tuple[ConditionUpdate, ...]:
    """The conditions `kubectl wait --for=condition=...` looks for: Complete and Succeeded (batch/v1 Job and
    Kubeflow Trainer spell it Complete, Kubeflow's v1 jobs Succeeded), or Failed."""
    if phase == "Succeeded":
        return (ConditionUpdate("Complete", "True", "Succeeded", message),
                ConditionUpdate("Succeeded", "True", "Succeeded", message))
    if phase == "Failed":
        return (ConditionUpdate("Failed", "True", "Failed", message),)
    return ()


def logs_of(name: str, namespace: str) -> dict[str, str]:
    """status.logs: KubeRay names the submitter Job after the RayJob; its log is the driver's output."""
    return {
        "submitterJob": name,
        "command": f"kubectl logs -n {namespace} job/{name} -c {SUBMITTER_CONTAINER}",
    }


# What observe_rayjob reads of a RayJob, by part (a unit test records its reads and holds it to these), and the
# name and uid that say which RayJob it is: both the slim copy mirroring keeps and the inputs it compares.
_RAYJOB_READ = {
    "metadata": ("namespace", "name", "uid"),
    "spec": ("ttlSecondsAfterFinished",),
    "status": ("jobDeploymentStatus", "rayClusterName", "startTime", "endTime", "failed", "reason", "message"),
}


def slim_rayjob(rayjob: dict) -> dict:
    """The part of a RayJob that `observe_rayjob` reads: what mirroring keeps of an event while it waits for the
    job's lock (a whole RayJob, managedFields and KubeRay's copy of the cluster's status included, is ~15 KB of
    JSON and several times that parsed; a burst's worth of them waiting was the operator's memory peak)."""
    parts = {part: rayjob.get(part) or {} for part in _RAYJOB_READ}
    return {part: {k: parts[part][k] for k in keys if k in parts[part]} for part, keys in _RAYJOB_READ.items()}


def rayjob_inputs(rayjob: dict | None) -> tuple:
    """All of a RayJob that `observe_rayjob` reads: two RayJobs with equal inputs give the same observation.

    KubeRay rewrites a RayJob's status some fifteen times while its cluster starts (each pod's state is copied
    into `rayClusterStatus`); mirroring skips the events that change none of this (mirror.py)."""
    if rayjob is None:
        return ()
    return tuple((rayjob.get(part) or {}).get(k) for part, keys in _RAYJOB_READ.items() for k in keys)


def observe_new_rayjob(name: str, namespace: str, export_enabled: bool, rehearsal: bool = False) -> Observation:
    """What mirroring makes of a RayJob KubeRay has not touched yet: written at creation, so the RayJob's first
    status (Initializing) finds nothing to change."""
    return observe_rayjob(name, {"metadata": {"namespace": namespace}}, export_enabled, rehearsal)


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
    fields: dict[str, Any] = {"rayJobName": name, "restarts": restarts_of(status)}
    namespace = (rayjob.get("metadata") or {}).get("namespace")
    if namespace:
        fields["logs"] = logs_of(name, namespace)
    if status.get("rayClusterName"):
        fields["rayClusterName"] = status["rayClusterName"]
    if status.get("startTime"):
        fields["startTime"] = status["startTime"]
    if deployment in _PENDING:
        # One status for the whole start: the RayCluster's name and the start time KubeRay adds at Initializing
        # are written with the next change (Running, a failure), not in a write (and watch event) of their own
        # per job; the message says how to find the cluster meanwhile, and it is the same from creation on.
        passive = {k: fields.pop(k) for k in ("rayClusterName", "startTime") if k in fields}
        where = f" -n {namespace}" if namespace else ""
        return Observation(
            "Pending",
            ConditionUpdate(
                "Ready", "False", "RayJobInitializing",
                f"RayJob {name} is starting its Ray cluster (kubectl get rayclusters{where} "
                f"-l {RAY_ORIGIN_LABEL}={name})",
            ),
            fields=fields,
            passive_fields=passive,
        )
    if deployment in _SUSPENDED:
        return Observation(
            "Suspended",
            ConditionUpdate("Ready", "False", "RayJobSuspended",
                            f"RayJob {name} is {deployment.lower()} (by spec.scheduling.suspend, or by Kueue until it "
                            "admits the job: see the QueueAdmitted condition)"),
            fields=fields,
        )
    if deployment in ("Running", "Retrying"):
        retry = " (retrying after a failure; resumes from the latest checkpoint)" if deployment == "Retrying" else ""
        return Observation(
            "Running",
            ConditionUpdate("Ready", "True", "RayJobRunning", f"RayJob {name} is Running{retry}"),
            fields=fields,
        )
    release = bool((rayjob.get("spec") or {}).get("ttlSecondsAfterFinished"))
    if deployment == "Complete":
        if export_enabled:
            return Observation(
                "Exporting",
                ConditionUpdate("Ready", "True", "Exporting", f"RayJob {name} completed; exporting the model"),
                fields=fields,
                wants_export=True,
                release_cluster=release,
            )
        done = "completed: the rehearsal passed, nothing was trained" if rehearsal else "completed"
        message = f"RayJob {name} {done}"
        return Observation(
            "Succeeded",
            ConditionUpdate("Ready", "False", "Succeeded", message),
            extra_conditions=terminal_conditions("Succeeded", message),
            fields={**fields, "completionTime": _end_time(status)},
            finished=True,
            release_cluster=release,
        )
    if deployment in ("Failed", "ValidationFailed"):
        reason = status.get("reason") or ("ValidationFailed" if deployment == "ValidationFailed" else "RayJobFailed")
        attempts = max(int(status.get("failed") or 0), 1)
        restarts = fields["restarts"]
        why = _ray_message(status) or "KubeRay gave no message"
        message = (
            f"KubeRay refused RayJob {name}: {why}"
            if deployment == "ValidationFailed"
            else f"RayJob {name} failed after {attempts} attempt{'s' if attempts != 1 else ''} "
            f"({restarts} restart{'s' if restarts != 1 else ''}): {why}"
        )
        logs = fields.get("logs")
        where = f"; the driver's log: {logs['command']}" if logs else ""
        return Observation(
            "Failed",
            ConditionUpdate("Ready", "False", reason, message),
            extra_conditions=terminal_conditions("Failed", message + where),
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


def restart_condition(
    restarts: int, retries: int, checkpoint: dict | None, resume: str = "auto"
) -> ConditionUpdate:
    """Says that a RayJob attempt failed and where the next attempt starts.

    Computed when `restarts` grows. With verl's resume_mode=auto on the job's own checkpoint directory
    the new attempt starts from the latest checkpoint saved there; the status knows its step only when
    one was reported, so otherwise it says what verl does rather than guess.
    """
    if resume != "auto":
        where = "checkpoints.resume is disable, so it starts from step 0"
    elif checkpoint and checkpoint.get("step") is not None:
        where = f"resumes from checkpoint step {checkpoint['step']} ({checkpoint.get('path', '')})"
    else:
        where = "resumes from the latest checkpoint in the job's directory, or from step 0 if none was saved"
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
        message = f"training and export finished; model written{where}"
        return Observation(
            "Succeeded",
            ConditionUpdate("Ready", "False", "Succeeded", message),
            extra_conditions=(
                ConditionUpdate("Exported", "True", "ConverterSucceeded", f"converter Job {name} succeeded{where}"),
                *terminal_conditions("Succeeded", message),
            ),
            fields=fields,
            finished=True,
        )
    if conditions.get("Failed", {}).get("status") == "True":
        message = (result or {}).get("message") or conditions["Failed"].get("message") or "converter failed"
        fields["completionTime"] = conditions["Failed"].get("lastTransitionTime") or now()
        text = f"converter Job {name} failed: {message}"
        return Observation(
            "Failed",
            ConditionUpdate("Ready", "False", "ExportFailed", text),
            extra_conditions=(
                ConditionUpdate("Exported", "False", "ConverterFailed", message),
                *terminal_conditions("Failed", f"{text}; its log: kubectl logs{_in_namespace(job)} job/{name}"),
            ),
            fields=fields,
            finished=True,
        )
    return Observation(
        "Exporting", ConditionUpdate("Ready", "True", "Exporting", f"converter Job {name} is running"), fields=fields
    )


def _in_namespace(obj: dict) -> str:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return f" -n {namespace}" if namespace else ""


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


def said_false(status: Mapping[str, Any], kind: str) -> bool:
    """Whether the status holds condition `kind` as False: a problem was said, and must be said to be over."""
    return any(c.get("type") == kind and c.get("status") == "False" for c in status.get("conditions") or [])


def seconds_since(timestamp: str, now: datetime) -> float:
    """Seconds from an RFC 3339 timestamp of the apiserver to `now`; infinite when there is none."""
    try:
        return (now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return float("inf")
