"""A list-then-watch of one kind of child that hands each event's object to a plain callback, without kopf.

KubeRay rewrites a RayJob's status 10-15 times while its cluster starts, and each rewrite is a watch event of
~15 KB. Through kopf every one of them cost a worker task, a batching window, its Body and Patch objects, a
logger and a handler invocation before our handler could see that nothing it reads had changed: at 1000 jobs
that was most of the operator's CPU (bench/operator/RESULTS.md, issue 34). This watch decodes the line and calls
the callback; the callback decides in microseconds whether the event matters.

What an informer guarantees and this keeps: every object present is seen once after each (re)list, every
change after it in order, and an object deleted while the watch was down is reported deleted when the relist
no longer finds it. A watch that ends (the server's timeout) resumes from the last resourceVersion seen, a
bookmark's included; one the apiserver has compacted past (410 Gone) lists again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grpo_operator.runtime.kube import TRANSIENT_ERRORS, ApiError, Client

log = logging.getLogger("grpo_operator.watch")

ObjectKey = tuple[str, str]  # (namespace, name)
# (event type, object): ADDED, MODIFIED or DELETED; a relist reports each object present as ADDED and each one
# gone since as DELETED (with the last labels seen, which is all a deleted child's handler needs).
OnEvent = Callable[[str, dict[str, Any]], None]


class WatchExpired(Exception):
    """The apiserver no longer has the resourceVersion the watch resumes from: list again."""


def key_of(obj: dict[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def stub_of(obj: dict[str, Any]) -> dict[str, Any]:
    """What is kept of each object between events: enough to report its deletion after a relist."""
    meta = obj.get("metadata") or {}
    return {
        "metadata": {
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "labels": dict(meta.get("labels") or {}),
        }
    }


def vanished(known: dict[ObjectKey, dict[str, Any]], listed: Iterable[ObjectKey]) -> list[ObjectKey]:
    """Objects seen before a relist that it did not find: deleted while the watch was down."""
    present = set(listed)
    return [key for key in known if key not in present]


def expired(exc: BaseException) -> bool:
    """The resourceVersion (or a list's continue token) is older than the apiserver keeps: only a list helps."""
    return isinstance(exc, WatchExpired) or (isinstance(exc, ApiError) and exc.status == 410)


def watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    """One decoded watch event; an ERROR event is raised (410 Gone as WatchExpired)."""
    event = json.loads(line)
    kind, obj = event.get("type", ""), event.get("object") or {}
    if kind == "ERROR":
        code = obj.get("code")
        if code == 410:
            raise WatchExpired(obj.get("message", "resource version too old"))
        raise ApiError(int(code or 500), str(obj.get("reason") or ""), str(obj.get("message") or ""))
    return kind, obj


@dataclass
class ChildWatch:
    """The watch of one resource collection (`path`: a namespace's or the cluster's), label-selected by the
    apiserver. Objects are reported through `on_event`, which must not block (it runs on the watch's task)."""

    client: Client
    path: str
    label_selector: str
    on_event: OnEvent
    server_timeout: int = 300
    page_size: int = 200
    backoffs: tuple[float, ...] = (1, 2, 5, 10, 20)
    known: dict[ObjectKey, dict[str, Any]] = field(default_factory=dict)
    resource_version: str | None = None

    async def run_forever(self) -> None:
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self.relist()
                await self.watch_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if expired(exc):
                    log.info("watch of %s expired (%s); listing again", self.path, exc)
                    self.resource_version = None
                    continue
                delay = self.backoffs[min(failures, len(self.backoffs) - 1)]
                failures += 1
                if isinstance(exc, (ApiError, *TRANSIENT_ERRORS)):
                    log.warning("watch of %s failed (%s); again in %.0f s", self.path, exc, delay)
                else:  # not the apiserver's doing (a line that is not JSON): logged whole, and the watch goes on
                    log.exception("watch of %s failed; again in %.0f s", self.path, delay)
                if isinstance(exc, ApiError) and exc.status == 404:
                    self.resource_version = None  # the CRD is (re)installed later: list from scratch then
                await asyncio.sleep(delay)

    async def relist(self) -> None:
        params = {"labelSelector": self.label_selector, "limit": str(self.page_size)}
        listed: list[ObjectKey] = []
        while True:
            page = await self.client.request("GET", self.path, params=params)
            for obj in page.get("items") or []:
                key = key_of(obj)
                listed.append(key)
                self._report("ADDED", obj)
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                break
            params = {**params, "continue": meta["continue"]}
        for key in vanished(self.known, listed):
            self._report("DELETED", self.known[key])
        self.resource_version = meta.get("resourceVersion")

    async def watch_once(self) -> None:
        """One watch request, until the server ends it; every event is reported as it arrives."""
        params = {
            "labelSelector": self.label_selector,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.server_timeout),
        }
        if self.resource_version:
            params["resourceVersion"] = self.resource_version
        async for line in self.client.stream_lines(self.path, params, read_timeout=self.server_timeout + 30):
            kind, obj = watch_event(line)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind != "BOOKMARK":
                self._report(kind, obj)
            if version:
                self.resource_version = version

    def _report(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = stub_of(obj)
        try:
            self.on_event(kind, obj)
        except Exception:
            # One object's bad event must not end the watch of all of them (kopf logs a handler's error too).
            log.exception("handling the %s event of %s/%s failed", kind, *key)
