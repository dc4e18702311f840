"""Dependency lookups shared by the jobs that ask the same question at about the same time.

A team's jobs name the same model and dataset claims: a burst of 500 jobs asked the apiserver 1000
times whether the same two PVCs exist, a fifth of the operator's requests while the burst was
being created (bench/operator/RESULTS.md, third round). Here one request answers every job that
asks while it is in flight, and a found object is remembered for a few seconds.

Only what was found is remembered. "Missing" is always asked afresh, so a user who applies the PVC
and the job together is never refused from memory. An object deleted within the remembered
seconds is taken as present, the same outcome as a deletion just after a fresh read: the job's
pods wait for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


def always(_: object) -> bool:
    """`keep` for answers worth remembering whatever they are (a pool's nodes, a namespace's claims)."""
    return True


class SharedLookups(Generic[T]):
    """`lookup(key, fetch)`: `fetch()`'s answer, shared by concurrent callers, remembered when `keep(answer)`."""

    def __init__(self, remember_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.remember_seconds = remember_seconds
        self._clock = clock
        self._known: dict[Hashable, tuple[float, T]] = {}
        self._in_flight: dict[Hashable, asyncio.Future[T]] = {}

    async def lookup(self, key: Hashable, fetch: Callable[[], Awaitable[T]], keep: Callable[[T], bool]) -> T:
        now = self._clock()
        known = self._known.get(key)
        if known is not None:
            if now - known[0] < self.remember_seconds:
                return known[1]
            del self._known[key]
        pending = self._in_flight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            answer = await fetch()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # marked retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._in_flight[key]
        future.set_result(answer)
        if keep(answer) and self.remember_seconds > 0:
            self._expire(now)
            self._known[key] = (self._clock(), answer)
        return answer

    def _expire(self, now: float) -> None:
        # Keys are (namespace, name) of a few shared objects; dropping stale ones keeps it that small.
        if len(self._known) > 256:
            for key in [k for k, (at, _) in self._known.items() if now - at >= self.remember_seconds]:
                del self._known[key]
