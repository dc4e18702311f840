"""Which of the handlers' requests goes first when more are waiting than there are connections.

In a burst, the requests that create a job's children queued behind the status writes and status
mirroring of the jobs before it, so every job's RayJob came late. The handlers' client lets
requests through a `PriorityGate` in the order of `REQUEST_PRIORITY`: creation before anything
else, and among creations the job that arrived first. Nothing waits longer than the burst: the gate
only orders requests, it never holds a free connection back.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

CREATION = 0
BACKGROUND = 1  # status writes, status mirroring, suspend forwarding, the converter

# (class, arrival): lower first. Tasks started by asyncio.gather inherit it from their creator.
REQUEST_PRIORITY: contextvars.ContextVar[tuple[int, float]] = contextvars.ContextVar(
    "grpo_request_priority", default=(BACKGROUND, 0.0)
)


@contextmanager
def creating(arrival: float) -> Iterator[None]:
    """Requests made inside (and in tasks started inside) go ahead of background ones, oldest job first."""
    token = REQUEST_PRIORITY.set((CREATION, arrival))
    try:
        yield
    finally:
        REQUEST_PRIORITY.reset(token)


class PriorityGate:
    """At most `limit` holders at once; waiters are let in lowest priority first, FIFO among equals."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: list[tuple[tuple[int, float], int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def acquire(self, priority: tuple[int, float]) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed the slot just as we were cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():  # a cancelled waiter's future is skipped
                future.set_result(None)
                return
        self._free += 1

    def waiting(self) -> int:
        return sum(not f.done() for _, _, f in self._waiters)
