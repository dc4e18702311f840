"""What a handler derives from a GRPOJob's spec (its plan's names, the claims it mounts), computed once per
generation of each job instead of on every event and timer: parsing and planning a spec costs milliseconds, and a
job's status mirroring and storage check run many times between two edits of its spec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerGeneration(Generic[T]):
    """`of(job)`: `derive(job)` for the job's (namespace, name, uid, generation, runtime taken), remembered for the
    `limit` most recent ones (None, when derive refuses the spec, is remembered too: the spec is the same until
    edited)."""

    def __init__(self, derive: Callable[[dict[str, Any]], T | None], limit: int = 4096) -> None:
        self._derive = derive
        self._limit = limit
        self._known: dict[tuple[str, str, str, int, str, int], T | None] = {}

    def of(self, job: dict[str, Any]) -> T | None:
        meta = job["metadata"]
        # The effective spec is the generation's over the runtime the job took (status.runtime): a job seen before
        # its first status write recorded the runtime means something else.
        taken = (job.get("status") or {}).get("runtime") or {}
        key = (meta["namespace"], meta["name"], meta.get("uid", ""), int(meta.get("generation") or 0),
               str(taken.get("uid") or taken.get("name", "")), int(taken.get("generation") or 0))
        if key in self._known:
            return self._known[key]
        found = self._derive(job)
        if len(self._known) >= self._limit:
            self._known.pop(next(iter(self._known)), None)  # oldest first: dicts keep insertion order
        self._known[key] = found
        return found
