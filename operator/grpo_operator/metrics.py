"""The operator's Prometheus metrics, named in the controller-runtime style with a grpo_operator_ prefix."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

from grpo_operator import __version__

RECONCILE_TOTAL = Counter("grpo_operator_reconcile_total", "GRPOJob reconciliations by result.", ["result"])
RECONCILE_DURATION = Histogram(
    "grpo_operator_reconcile_duration_seconds",
    "Time spent in one reconciliation.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOBS = Gauge("grpo_operator_jobs", "GRPOJobs by phase.", ["phase"])
JOB_DURATION = Histogram(
    "grpo_operator_job_duration_seconds",
    "Time from a GRPOJob's creation to Succeeded or Failed.",
    ["phase"],
    buckets=(60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800),
)
CHILD_CREATE_ERRORS = Counter(
    "grpo_operator_child_create_errors_total", "Errors creating a GRPOJob's children (other than AlreadyExists)."
)
BUILD_INFO = Info("grpo_operator_build", "Version of the running operator.")
BUILD_INFO.info({"version": __version__})

PHASES = ("Pending", "Running", "Suspended", "Exporting", "Succeeded", "Failed", "Invalid")
for _phase in PHASES:
    JOBS.labels(phase=_phase).set(0)

_phases: dict[tuple[str, str], str] = {}
_lock = threading.Lock()
_served = False


def serve(host: str, port: int) -> None:
    global _served
    with _lock:
        if not _served:
            start_http_server(port, addr=host)
            _served = True


def _publish() -> None:
    counts = dict.fromkeys(PHASES, 0)
    for phase in _phases.values():
        counts[phase] = counts.get(phase, 0) + 1
    for phase, count in counts.items():
        JOBS.labels(phase=phase).set(count)


def record_phase(namespace: str, name: str, phase: str) -> None:
    with _lock:
        _phases[(namespace, name)] = phase
        _publish()


def forget(namespace: str, name: str) -> None:
    with _lock:
        _phases.pop((namespace, name), None)
        _publish()


def observe_reconcile(result: str, seconds: float) -> None:
    RECONCILE_TOTAL.labels(result=result).inc()
    RECONCILE_DURATION.observe(seconds)


def observe_completion(created: str | None, phase: str) -> None:
    if not created:
        return
    started = datetime.fromisoformat(created.replace("Z", "+00:00"))
    JOB_DURATION.labels(phase=phase).observe((datetime.now(UTC) - started).total_seconds())
