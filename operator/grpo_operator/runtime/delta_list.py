"""A namespace's objects of one kind, kept current by asking only what changed since the last look.

The waiting check reads a namespace's claims, their Events and its pods' Warnings once a check period while jobs
wait there. With 1000 jobs in a namespace those lists were 1.8 MB, 0.4 MB and 1.3 MB of JSON, decoded whole every
20 s though a few of their objects had changed: a fifth of the operator's CPU while the cluster bound the jobs' pods
(bench/operator/RESULTS.md, eleventh round). Here the first look lists; each later one is a watch from the last
resourceVersion seen that the apiserver ends after a second (`timeoutSeconds`), which answers with the changes
since (from its watch cache, or from etcd for Events, which the apiserver does not cache by default). One request a
look, as before, and the bytes of what changed instead of everything. What is kept of each object is its `fact` (a
few fields, not the object), by name.

The kept resourceVersion moves only with the namespace's own changes (a one-second watch ends before any bookmark),
so in a quiet namespace it falls behind etcd's compaction (5 minutes): that look is answered 410 Gone and lists
again, as does any look whose watch fails. A watch the operator's RBAC refuses (403) is said once and not tried
again: every look lists. A namespace not looked at for `forget_after` seconds is forgotten (and listed when it is
looked at again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from grpo_operator.runtime import kube
from grpo_operator.runtime.watch import expired, watch_event

log = logging.getLogger("grpo_operator.delta_list")
F = TypeVar("F")

# The shortest watch the apiserver serves (whole seconds): the changes since the version asked for come first.
_CHANGES_SECONDS = 1


@dataclass
class _Kept(Generic[F]):
    facts: dict[str, F]
    version: str
    used: float


class DeltaList(Generic[F]):
    """`current(namespace)`: name -> `fact_of(object)` for every object of `path_of(namespace)` that the selectors
    (`params`) select, as the apiserver has them now. One look per namespace at a time: the caller shares one among
    the jobs that ask together (binding.py's SharedLookups), since two would apply the same changes to one copy."""

    def __init__(self, path_of: Callable[[str], str], fact_of: Callable[[dict[str, Any]], F],
                 params: Mapping[str, str] | None = None, forget_after: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path_of, self._fact_of, self._params = path_of, fact_of, dict(params or {})
        self._forget_after, self._clock = forget_after, clock
        self._kept: dict[str, _Kept[F]] = {}
        self._warned: set[int] = set()  # the statuses of failed watches said so far (0: not the apiserver's answer)
        self._watch_refused = False

    async def current(self, namespace: str) -> dict[str, F]:
        now = self._clock()
        self._forget_unused(now)
        kept = None if self._watch_refused else self._kept.get(namespace)
        if kept is not None:
            try:
                await self._apply_changes(namespace, kept)
            except Exception as exc:  # compacted past (410), or the watch failed: a list says it all, with its retries
                self._said_failed(namespace, exc)
                kept = None
        if kept is None:
            kept = await self._list(namespace)
            self._kept[namespace] = kept
        kept.used = now
        return dict(kept.facts)

    def _said_failed(self, namespace: str, exc: Exception) -> None:
        """A failed watch in the log, once per status: each failure that recurs would otherwise be said every
        period. A refusal (403: RBAC without `watch`) ends the watching: each look would be refused again."""
        if expired(exc):
            return
        status = exc.status if isinstance(exc, kube.ApiError) else 0
        if status == 403:
            self._watch_refused = True
        if status not in self._warned:
            self._warned.add(status)
            log.warning("watching %s for changes failed (%s); listing it whole instead%s", self._path_of(namespace),
                        exc, " from now on" if status == 403 else "")

    async def _list(self, namespace: str) -> _Kept[F]:
        found = await kube.api().request("GET", self._path_of(namespace), params=self._params or None)
        facts = {str(o["metadata"]["name"]): self._fact_of(o) for o in found.get("items") or []}
        return _Kept(facts, str((found.get("metadata") or {}).get("resourceVersion") or ""), self._clock())

    async def _apply_changes(self, namespace: str, kept: _Kept[F]) -> None:
        params = {**self._params, "watch": "1", "resourceVersion": kept.version,
                  "timeoutSeconds": str(_CHANGES_SECONDS)}
        async for line in kube.api().stream_lines(self._path_of(namespace), params, read_timeout=_CHANGES_SECONDS + 30):
            kind, obj = watch_event(line)  # an ERROR (410 Gone included) is raised
            meta = obj.get("metadata") or {}
            if kind == "DELETED":
                kept.facts.pop(str(meta.get("name")), None)
            elif kind in ("ADDED", "MODIFIED"):
                kept.facts[str(meta.get("name"))] = self._fact_of(obj)
            if meta.get("resourceVersion"):
                kept.version = str(meta["resourceVersion"])

    def _forget_unused(self, now: float) -> None:
        for namespace in [n for n, k in self._kept.items() if now - k.used > self._forget_after]:
            del self._kept[namespace]
