"""The operator's Prometheus metrics, named in the controller-runtime style with a grpo_operator_ prefix."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

from grpo_operator import __version__
from grpo_operator.api import MONITORING_DEFAULTS

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
# Per-job series, labelled like kube-state-metrics (`namespace` is the GRPOJob's, so scrape the
# operator with honor_labels) and `grpojob` like the trainer's series after the PodMonitor's relabeling:
# alert rules join the two on (namespace, grpojob).
JOB_PHASE = Gauge(
    "grpo_operator_job_phase", "1 for the current phase of each GRPOJob.", ["namespace", "grpojob", "phase"]
)
JOB_KL_COEF = Gauge(
    "grpo_operator_job_kl_coef",
    "Configured KL loss coefficient (spec.algorithm.klLoss.coef) of each GRPOJob that uses the KL loss.",
    ["namespace", "grpojob"],
)
KUBERAY_COMPATIBLE = Gauge(
    "grpo_operator_kuberay_compatible",
    "1 when the installed KubeRay's RayJob CRD has every field the operator renders, 0 when it lacks one "
    "(every GRPOJob is then refused naming the version needed); absent until known.",
)
JOB_ALERT_THRESHOLD = Gauge(
    "grpo_operator_job_alert_threshold",
    "Each GRPOJob's training-health alert thresholds (spec.monitoring), by threshold: entropy_collapse_fraction, "
    "kl_growth_factor.",
    ["namespace", "grpojob", "threshold"],
)
# spec.monitoring field -> the threshold label the alert rules select (charts/.../prometheus-rules.yaml).
ALERT_THRESHOLDS = {"entropyCollapseFraction": "entropy_collapse_fraction", "klGrowthFactor": "kl_growth_factor"}
# A stored spec carries the defaults (the CRD applies them); a spec that bypassed the CRD falls back to
# the model's rather than leaving the job without alerts.
_THRESHOLD_DEFAULTS = MONITORING_DEFAULTS
GUARDRAIL_TRIPS = Counter(
    "grpo_operator_guardrail_trips_total",
    "Guardrail trips the operator handled, by detector and outcome (Observed, RolledBack, Suspended).",
    ["detector", "outcome"],
)
API_REQUESTS = Counter(
    "grpo_operator_api_requests_total",
    "Requests the operator's handlers made to the Kubernetes API (kopf's own watches and Events not included), by "
    "verb, resource and call site (the handler or timer that made them).",
    ["verb", "resource", "call_site"],
)
LEADING = Gauge(
    "grpo_operator_leading", "1 on the replica that holds the leader lease and reconciles; 0 on followers."
)
BUILD_INFO = Info("grpo_operator_build", "Version of the running operator.")
BUILD_INFO.info({"version": __version__})

PHASES = ("Preflight", "Pending", "Running", "Suspended", "Exporting", "Succeeded", "Failed", "Invalid")
for _phase in PHASES:
    JOBS.labels(phase=_phase).set(0)

_phases: dict[tuple[str, str], str] = {}
_lock = threading.Lock()
_served = False


def _count(phase: str, delta: int) -> None:
    # Kept per phase, not recounted over every job on each event: O(1), not O(jobs), per event.
    JOBS.labels(phase=phase).inc(delta)


def serve(host: str, port: int) -> None:
    global _served
    with _lock:
        if not _served:
            start_http_server(port, addr=host)
            _served = True


def record_phase(namespace: str, name: str, phase: str) -> None:
    with _lock:
        previous = _phases.get((namespace, name))
        if previous == phase:
            return
        _phases[(namespace, name)] = phase
        if previous is not None:
            JOB_PHASE.remove(namespace, name, previous)
            _count(previous, -1)
        JOB_PHASE.labels(namespace=namespace, grpojob=name, phase=phase).set(1)
        _count(phase, 1)


def kl_coef(spec: Mapping[str, Any]) -> float | None:
    """The KL loss weight a GRPOJob trains with, None when its KL loss is off.

    The apiserver applies the CRD's defaults, so a stored spec carries klLoss even when the user
    wrote none; the fallbacks cover a spec that bypassed them.
    """
    kl = (spec.get("algorithm") or {}).get("klLoss") or {}
    if not kl.get("enabled", True):
        return None
    coef = kl.get("coef", 0.001)
    return float(coef) if isinstance(coef, int | float) and not isinstance(coef, bool) else None


def alert_thresholds(spec: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> dict[str, float]:
    """threshold label -> value, from spec.monitoring, else the job's runtime's `monitoring`, else the default."""
    monitoring, defaults = spec.get("monitoring") or {}, runtime or {}
    found: dict[str, float] = {}
    for field, label in ALERT_THRESHOLDS.items():
        value = monitoring.get(field)
        if value is None:
            value = defaults.get(field, _THRESHOLD_DEFAULTS[field])
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[label] = float(value)
    return found


def record_spec(namespace: str, name: str, spec: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> None:
    """Export what alert thresholds need from the spec: the KL coefficient and spec.monitoring (`runtime`: the
    monitoring section of the runtime the job took, for thresholds the job leaves unset)."""
    coef = kl_coef(spec)
    with _lock:
        if coef is None:
            JOB_KL_COEF.remove(namespace, name)  # a no-op when never set
        else:
            JOB_KL_COEF.labels(namespace=namespace, grpojob=name).set(coef)
        for threshold, value in alert_thresholds(spec, runtime).items():
            JOB_ALERT_THRESHOLD.labels(namespace=namespace, grpojob=name, threshold=threshold).set(value)


def forget(namespace: str, name: str) -> None:
    with _lock:
        phase = _phases.pop((namespace, name), None)
        if phase is not None:
            JOB_PHASE.remove(namespace, name, phase)
            _count(phase, -1)
        JOB_KL_COEF.remove(namespace, name)  # a no-op when never set
        for threshold in ALERT_THRESHOLDS.values():
            JOB_ALERT_THRESHOLD.remove(namespace, name, threshold)  # a no-op when never set


def count_api_request(verb: str, resource: str, call_site: str) -> None:
    API_REQUESTS.labels(verb=verb, resource=resource, call_site=call_site).inc()


def observe_reconcile(result: str, seconds: float) -> None:
    RECONCILE_TOTAL.labels(result=result).inc()
    RECONCILE_DURATION.observe(seconds)


def observe_completion(created: str | None, phase: str) -> None:
    if not created:
        return
    started = datetime.fromisoformat(created.replace("Z", "+00:00"))
    JOB_DURATION.labels(phase=phase).observe((datetime.now(UTC) - started).total_seconds())
