"""Operator settings, from the environment (the Helm chart sets them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from grpo_operator.node_rules import DEFAULT_DRIVER_FLOOR
from grpo_operator.render.network_policy import NetworkPeers, OperatorIdentity

NETWORK_POLICY_PREFIX = "GRPO_OPERATOR_NETWORK_POLICY"


def _flag(text: str, variable: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"{variable}={text!r}: expected true or false")
    return text.strip().lower() == "true"


def _autoscaling(text: str, variable: str) -> Literal["auto", "always", "never"]:
    value = text.strip()
    if value == "auto" or value == "always" or value == "never":
        return value
    raise ValueError(f"{variable}={text!r}: expected auto, always or never")


# A TLS record's largest plaintext: a smaller read buffer would take a record in several event-loop turns.
TLS_RECORD_BYTES = 16 * 1024


def _tls_read_buffer(text: str, variable: str) -> int:
    value = int(text)
    if value == 0 or value >= TLS_RECORD_BYTES:
        return value
    raise ValueError(f"{variable}={text!r}: expected 0 (Python's own 256 KiB) or at least {TLS_RECORD_BYTES}, "
                     "a TLS record's size")


def _json_object(text: str, variable: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{variable}: not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{variable}: expected a JSON object, got {text!r}")
    return value


def _label_selector(text: str, variable: str) -> dict[str, Any]:
    """A Kubernetes LabelSelector in JSON; refused here, at start-up, rather than by every policy's creation."""
    selector = _json_object(text, variable)
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise ValueError(f"{variable}: a label selector has matchLabels and matchExpressions, not {sorted(unknown)}")
    return selector


def _network_peers(env: Mapping[str, str]) -> NetworkPeers | None:
    """The NetworkPolicy each job gets (render/network_policy.py), or None when it is turned off."""
    p = NETWORK_POLICY_PREFIX
    if not _flag(env.get(p, "true"), p):
        return None
    defaults = NetworkPeers()
    # The operator's own pods (the release's namespace and selector labels): the chart sets both; an operator run
    # outside a pod sets neither and admits no pod.
    namespace, labels = env.get(p + "_OPERATOR_NAMESPACE", ""), env.get(p + "_OPERATOR_LABELS", "")
    operator = None
    if namespace and labels:
        pod_labels = _json_object(labels, p + "_OPERATOR_LABELS")
        operator = OperatorIdentity(namespace, {str(k): str(v) for k, v in pod_labels.items()})

    def selector(suffix: str) -> dict[str, Any] | None:
        text = env.get(p + suffix, "")
        return _label_selector(text, p + suffix) if text else None

    kuberay_namespaces, kuberay_pods = selector("_KUBERAY_NAMESPACES"), selector("_KUBERAY_PODS")
    return NetworkPeers(
        kuberay_namespaces=defaults.kuberay_namespaces if kuberay_namespaces is None else kuberay_namespaces,
        kuberay_pods=defaults.kuberay_pods if kuberay_pods is None else kuberay_pods,
        operator=operator,
        # Unset or empty: scrapers from anywhere.
        metrics_namespaces=selector("_METRICS_NAMESPACES"),
    )


@dataclass(frozen=True)
class OperatorSettings:
    default_trainer_image: str = "grpo-trainer:0.1.0"
    # The NVIDIA driver major version GPU pods need (the default trainer image's CUDA 13: R580); 0 turns the
    # check off, for an image built on an older CUDA (node_rules.py).
    driver_floor: int = DEFAULT_DRIVER_FLOOR
    namespaces: tuple[str, ...] = field(default_factory=tuple)  # empty: the whole cluster
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    # How often a job that waits for a missing PVC or ConfigMap is checked again.
    dependency_retry_seconds: float = 30.0
    # Whether a job that no node fits now waits for an autoscaler (reconcile/autoscaling.py): auto (Karpenter's
    # NodePools say), always (cluster-autoscaler, node auto-provisioning), never (refused, as before).
    autoscaling: Literal["auto", "always", "never"] = "auto"
    # How often the claims and pods of a job that waits are checked (reconcile/binding.py).
    storage_check_seconds: float = 20.0
    # How long a claim may be Pending while its provisioner works on it (or before any controller has said
    # anything) before the storage check reports it: a burst of claims keeps a provisioner busy for a while.
    claim_provisioning_grace_seconds: float = 120.0
    # How soon a job whose creation failed past the client's own retries (an API outage) is tried again.
    error_retry_seconds: float = 15.0
    # HTTP connections of each session (kopf's, whose watches take one each, and the handlers');
    # unbounded, a burst opens hundreds, each with its own TLS buffers.
    max_connections: int = 32
    # Bytes asyncio reads from each TLS connection's socket at once (memory.py says why not its 256 KiB); 0 keeps
    # Python's own.
    tls_read_buffer_bytes: int = 64 * 1024
    # Jobs being created or resynced at once; the rest of a burst (or of a restart's listing) waits its turn.
    max_jobs_in_flight: int = 64
    # How long kopf keeps an object's worker (and the object's body) after its last event.
    worker_idle_seconds: float = 1.0
    # How often freed heap memory is handed back to the OS (memory.py); 0 turns it off.
    heap_trim_seconds: float = 10.0
    # New container objects between two collections of the youngest generation (memory.py says why not Python's
    # 700); 0 keeps Python's own.
    gc_young_threshold: int = 20_000
    # Leader election (leader.py): a lease not renewed for its duration is taken over. Twice client-go's 15/10 s:
    # one Python thread renews the lease and runs kopf, and a CPU-starved pod must not lose it (chart values.yaml).
    lease_duration_seconds: float = 30.0
    renew_deadline_seconds: float = 20.0
    retry_period_seconds: float = 2.0
    # Whom each job's NetworkPolicy admits; None: no policy (the chart's networkPolicy.enabled=false).
    network_policy: NetworkPeers | None = field(default_factory=NetworkPeers)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OperatorSettings:
        prefix = "GRPO_OPERATOR_"
        namespaces = tuple(n.strip() for n in env.get(prefix + "NAMESPACES", "").split(",") if n.strip())
        try:
            return cls(
                default_trainer_image=env.get(prefix + "DEFAULT_TRAINER_IMAGE", cls.default_trainer_image),
                driver_floor=int(env.get(prefix + "DRIVER_FLOOR", cls.driver_floor)),
                autoscaling=_autoscaling(env.get(prefix + "AUTOSCALING", cls.autoscaling), prefix + "AUTOSCALING"),
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
                tls_read_buffer_bytes=_tls_read_buffer(
                    env.get(prefix + "TLS_READ_BUFFER_BYTES", str(cls.tls_read_buffer_bytes)),
                    prefix + "TLS_READ_BUFFER_BYTES",
                ),
                max_jobs_in_flight=int(env.get(prefix + "MAX_JOBS_IN_FLIGHT", cls.max_jobs_in_flight)),
                worker_idle_seconds=float(env.get(prefix + "WORKER_IDLE_SECONDS", cls.worker_idle_seconds)),
                heap_trim_seconds=float(env.get(prefix + "HEAP_TRIM_SECONDS", cls.heap_trim_seconds)),
                gc_young_threshold=int(env.get(prefix + "GC_YOUNG_THRESHOLD", cls.gc_young_threshold)),
                lease_duration_seconds=float(env.get(prefix + "LEASE_DURATION_SECONDS", cls.lease_duration_seconds)),
                renew_deadline_seconds=float(env.get(prefix + "RENEW_DEADLINE_SECONDS", cls.renew_deadline_seconds)),
                retry_period_seconds=float(env.get(prefix + "RETRY_PERIOD_SECONDS", cls.retry_period_seconds)),
                network_policy=_network_peers(env),
            )
        except ValueError as exc:
            raise SystemExit(f"grpo-operator: bad setting in {prefix}* environment: {exc}") from exc
