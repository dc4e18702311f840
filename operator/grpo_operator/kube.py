"""The few Kubernetes API calls the handlers make, each one idempotent.

Children have fixed names, so "create, and treat 409 AlreadyExists as done" is safe to repeat after
a crash at any point: a restarted operator ends with exactly one of each child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from grpo_operator.settings import OperatorSettings

GROUP, VERSION, PLURAL = "grpo.dev", "v1alpha1", "grpojobs"
RAY_GROUP, RAY_VERSION = "ray.io", "v1"


def load_config() -> None:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


# Transient API failures (a restarting apiserver, 429 from priority and fairness, a dropped
# connection) are retried here with backoff, for every verb: creates are safe to repeat because a
# repeated create answers 409 AlreadyExists, which create_if_absent treats as done, and the patches
# are merge patches of the same content.
TRANSIENT_RETRY = Retry(
    total=6,
    backoff_factor=0.25,  # 0.25, 0.5, 1, 2, 4 s (urllib3 caps at backoff_max)
    status_forcelist=(429, 500, 502, 503, 504),
    allowed_methods=None,
    respect_retry_after_header=True,
    raise_on_status=False,
)


@cache
def api_client() -> client.ApiClient:
    configuration = client.Configuration.get_default_copy()
    configuration.retries = TRANSIENT_RETRY
    # One pooled connection per handler thread: with the default (5 per CPU) the extra threads
    # open and drop a TLS connection per request ("Connection pool is full").
    configuration.connection_pool_maxsize = OperatorSettings.from_env().max_workers
    return client.ApiClient(configuration)


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def batch() -> client.BatchV1Api:
    return client.BatchV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def rbac() -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(api_client())


@dataclass(frozen=True)
class Kind:
    create: Callable[[str, dict], Any]
    read: Callable[[str, str], Any]


def _kinds() -> dict[str, Kind]:
    def custom_kind(group: str, version: str, plural: str) -> Kind:
        return Kind(
            lambda ns, body: custom().create_namespaced_custom_object(group, version, ns, plural, body),
            lambda ns, name: custom().get_namespaced_custom_object(group, version, ns, plural, name),
        )

    return {
        "ConfigMap": Kind(
            lambda ns, b: core().create_namespaced_config_map(ns, b),
            lambda ns, n: core().read_namespaced_config_map(n, ns),
        ),
        "PersistentVolumeClaim": Kind(
            lambda ns, b: core().create_namespaced_persistent_volume_claim(ns, b),
            lambda ns, n: core().read_namespaced_persistent_volume_claim(n, ns),
        ),
        "ServiceAccount": Kind(
            lambda ns, b: core().create_namespaced_service_account(ns, b),
            lambda ns, n: core().read_namespaced_service_account(n, ns),
        ),
        "Role": Kind(
            lambda ns, b: rbac().create_namespaced_role(ns, b), lambda ns, n: rbac().read_namespaced_role(n, ns)
        ),
        "RoleBinding": Kind(
            lambda ns, b: rbac().create_namespaced_role_binding(ns, b),
            lambda ns, n: rbac().read_namespaced_role_binding(n, ns),
        ),
        "Job": Kind(
            lambda ns, b: batch().create_namespaced_job(ns, b), lambda ns, n: batch().read_namespaced_job(n, ns)
        ),
        "RayJob": custom_kind(RAY_GROUP, RAY_VERSION, "rayjobs"),
    }


KINDS = _kinds()


def create_if_absent(body: dict) -> bool:
    """Create `body`; True if this call created it, False if it already existed."""
    kind = KINDS[body["kind"]]
    try:
        kind.create(body["metadata"]["namespace"], body)
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    return True


def exists(kind: str, namespace: str, name: str) -> bool:
    return get(kind, namespace, name) is not None


def get(kind: str, namespace: str, name: str) -> dict | None:
    try:
        obj = KINDS[kind].read(namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj if isinstance(obj, dict) else api_client().sanitize_for_serialization(obj)


def get_grpojob(namespace: str, name: str) -> dict | None:
    try:
        return custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def patch_grpojob_status(namespace: str, name: str, status: dict) -> None:
    custom().patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})


def patch_rayjob_suspend(namespace: str, name: str, suspend: bool) -> None:
    custom().patch_namespaced_custom_object(
        RAY_GROUP, RAY_VERSION, namespace, "rayjobs", name, {"spec": {"suspend": suspend}}
    )


def configmap_keys(namespace: str, name: str) -> set[str] | None:
    found = get("ConfigMap", namespace, name)
    if found is None:
        return None
    return set((found.get("data") or {}).keys()) | set((found.get("binaryData") or {}).keys())


def job_termination_message(namespace: str, job_name: str) -> dict | None:
    """The converter writes a JSON summary to its termination log; read it back from the pod."""
    pods = core().list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items
    for pod in sorted(pods, key=lambda p: p.metadata.creation_timestamp, reverse=True):
        for status in pod.status.container_statuses or []:
            terminated = status.state.terminated if status.state else None
            if terminated and terminated.message:
                try:
                    return json.loads(terminated.message)
                except json.JSONDecodeError:
                    return {"message": terminated.message.strip()}
    return None
