"""The namespace lists the waiting check reads (binding.py): its claims, their Events and its pods' Warnings, each
kept current by a `DeltaList` (only what changed since the last look is sent and decoded) as the few facts the
check uses of each object, not the objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpo_operator.reconcile import pods
from grpo_operator.reconcile.common import SETTINGS
from grpo_operator.runtime import kube
from grpo_operator.runtime.delta_list import DeltaList

# What storage.unbound and storage.provisioning_wait read of a claim's Event, and whose it is.
_CLAIM_EVENT_FIELDS = ("type", "reason", "message", "lastTimestamp", "firstTimestamp", "eventTime")


def claim_event_of(event: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: event[k] for k in _CLAIM_EVENT_FIELDS if event.get(k)}
    involved = event.get("involvedObject") or {}
    kept["claim"] = involved.get("name", "")
    if involved.get("uid"):
        kept["claimUid"] = involved["uid"]
    created = (event.get("metadata") or {}).get("creationTimestamp")
    if created:
        kept["metadata"] = {"creationTimestamp": created}
    return kept


# Looked at once a check period while jobs wait in the namespace; forgotten after ten periods unused.
_FORGET_AFTER = 10 * SETTINGS.storage_check_seconds
CLAIMS: DeltaList[kube.ClaimFacts] = DeltaList(
    kube.RESOURCES["PersistentVolumeClaim"].path, kube.claim_facts_of, forget_after=_FORGET_AFTER)
CLAIM_EVENTS: DeltaList[dict[str, Any]] = DeltaList(
    kube.RESOURCES["Event"].path, claim_event_of, {"fieldSelector": "involvedObject.kind=PersistentVolumeClaim"},
    forget_after=_FORGET_AFTER)
POD_WARNINGS: DeltaList[pods.PodWarning] = DeltaList(
    kube.RESOURCES["Event"].path, pods.pod_warning_of, {"fieldSelector": "involvedObject.kind=Pod,type=Warning"},
    forget_after=_FORGET_AFTER)


async def claims_in(namespace: str) -> dict[str, kube.ClaimFacts]:
    """Every PersistentVolumeClaim of the namespace, by name: one look for all the jobs that wait there."""
    return await CLAIMS.current(namespace)


async def claim_events_in(namespace: str) -> dict[str, list[dict[str, Any]]]:
    """The namespace's Events about PersistentVolumeClaims (binding, provisioning), by claim name."""
    by_claim: dict[str, list[dict[str, Any]]] = {}
    for event in (await CLAIM_EVENTS.current(namespace)).values():
        by_claim.setdefault(event["claim"], []).append(event)
    return by_claim


async def pod_warnings_in(namespace: str) -> list[pods.PodWarning]:
    """The namespace's Warning Events about pods (the scheduler's FailedScheduling, the kubelet's image pull and
    back-off failures, an autoscaler's refusals): one look for all the jobs that wait there, most often empty."""
    return list((await POD_WARNINGS.current(namespace)).values())
