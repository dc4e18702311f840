"""Operator settings, from the environment (the Helm chart sets them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OperatorSettings:
    default_trainer_image: str = "grpo-trainer:0.1.0"
    namespaces: tuple[str, ...] = field(default_factory=tuple)  # empty: the whole cluster
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    # How often a job that waits for a missing PVC or ConfigMap is checked again.
    dependency_retry_seconds: float = 30.0
    # How often the claims of a job that is still Pending are checked for binding (reconcile/storage.py).
    storage_check_seconds: float = 20.0
    # How long a claim may be Pending while its provisioner works on it (or before any controller has said
    # anything) before the storage check reports it: a burst of claims keeps a provisioner busy for a while.
    claim_provisioning_grace_seconds: float = 120.0
    # How soon a job whose creation failed past the client's own retries (an API outage) is tried again.
    error_retry_seconds: float = 15.0
    # HTTP connections of each session (kopf's, whose watches take one each, and the handlers');
    # unbounded, a burst opens hundreds, each with its own TLS buffers.
    max_connections: int = 32
    # Jobs being created or resynced at once; the rest of a burst (or of a restart's listing) waits its turn.
    max_jobs_in_flight: int = 64
    # How long kopf keeps an object's worker (and the object's body) after its last event.
    worker_idle_seconds: float = 1.0
    # How often freed heap memory is handed back to the OS (memory.py); 0 turns it off.
    heap_trim_seconds: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OperatorSettings:
        prefix = "GRPO_OPERATOR_"
        namespaces = tuple(n.strip() for n in env.get(prefix + "NAMESPACES", "").split(",") if n.strip())
        try:
            return cls(
                default_trainer_image=env.get(prefix + "DEFAULT_TRAINER_IMAGE", cls.default_trainer_image),
                namespaces=namespaces,
                metrics_host=env.get(prefix + "METRICS_HOST", cls.metrics_host),
                metrics_port=int(env.get(prefix + "METRICS_PORT", cls.metrics_port)),
                dependency_retry_seconds=float(
                    env.get(prefix + "DEPENDENCY_RETRY_SECONDS", cls.dependency_retry_seconds)
                ),
                error_retry_seconds=float(env.get(prefix + "ERROR_RETRY_SECONDS", cls.error_retry_seconds)),
                storage_check_seconds=float(env.get(prefix + "STORAGE_CHECK_SECONDS", cls.storage_check_seconds)),
                claim_provisioning_grace_seconds=float(
                    env.get(prefix + "CLAIM_PROVISIONING_GRACE_SECONDS", cls.claim_provisioning_grace_seconds)
                ),
                max_connections=int(env.get(prefix + "MAX_CONNECTIONS", cls.max_connections)),
                max_jobs_in_flight=int(env.get(prefix + "MAX_JOBS_IN_FLIGHT", cls.max_jobs_in_flight)),
                worker_idle_seconds=float(env.get(prefix + "WORKER_IDLE_SECONDS", cls.worker_idle_seconds)),
                heap_trim_seconds=float(env.get(prefix + "HEAP_TRIM_SECONDS", cls.heap_trim_seconds)),
            )
        except ValueError as exc:
            raise SystemExit(f"grpo-operator: bad setting in {prefix}* environment: {exc}") from exc
