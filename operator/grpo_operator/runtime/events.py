"""Kubernetes Events about GRPOJobs, posted by the operator's own client.

kopf's `kopf.event` works only inside kopf's per-object tasks (its queue lives in a context variable set
there); status mirroring runs on the operator's own RayJob watch (watch.py), outside them. These Events go
through the handlers' client instead: counted by call site like every other request (the site that posted
it, not "kopf"), behind creations in the request gate, retried as the client retries. Posting never blocks
and never fails the caller: an Event that cannot be posted is logged, as kopf did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from grpo_operator.render.common import OPERATOR_NAME
from grpo_operator.runtime import kube
from grpo_operator.runtime.priority import BACKGROUND, REQUEST_PRIORITY

log = logging.getLogger("grpo_operator.events")

# The apiserver takes longer messages, but kubectl describe does not show them well; kopf cut at the same length.
MESSAGE_LIMIT = 1024


def event_body(obj: Mapping[str, Any], type: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A core/v1 Event about `obj` (a GRPOJob body), as `kubectl describe` and `kubectl get events` show it."""
    meta = obj.get("metadata") or {}
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'grpojob')}.", "namespace": meta.get("namespace", "")},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", f"{kube.GROUP}/{kube.VERSION}"),
            "kind": obj.get("kind", "GRPOJob"),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
        },
        "type": type,
        "reason": reason,
        "message": message,
        "source": {"component": OPERATOR_NAME},
        "reportingComponent": OPERATOR_NAME,
        "reportingInstance": OPERATOR_NAME,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


_posting: set[asyncio.Task] = set()


def subject_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """All of `obj` that `event_body` reads: a caller that may post about a job later keeps this, not its body."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": obj.get("apiVersion", f"{kube.GROUP}/{kube.VERSION}"), "kind": obj.get("kind", "GRPOJob"),
            "metadata": {key: meta.get(key, "") for key in ("name", "namespace", "uid")}}


def post(obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
    """Post an Event about `obj` in the background (the caller's call site is the request's)."""
    body = event_body(obj, type, reason, message, datetime.now(UTC))
    task = asyncio.get_running_loop().create_task(_post(body), name=f"Event {reason}")
    _posting.add(task)
    task.add_done_callback(_posting.discard)


def warn(obj: Mapping[str, Any], reason: str, message: str) -> None:
    post(obj, "Warning", reason, message)


async def _post(body: dict[str, Any]) -> None:
    REQUEST_PRIORITY.set((BACKGROUND, 0.0))  # this task's own context: an Event never goes ahead of a creation
    try:
        await kube.api().request("POST", kube.RESOURCES["Event"].path(body["metadata"]["namespace"]), body,
                                 answer=False)
    except Exception as exc:
        involved = body["involvedObject"]
        log.warning("could not post the %s Event about %s/%s: %s", body["reason"], involved["namespace"],
                    involved["name"], exc)


async def flush() -> None:
    """Wait for the Events being posted (clean-up: they are sent before the client closes)."""
    if _posting:
        await asyncio.wait(list(_posting), timeout=10)
