"""Later attempts at a job, and one attempt at a time per job.

The GRPOJob handler is a watch-event handler: kopf runs it once per event and does not retry it.
A job waiting for its PVC, or one whose creation hit an API error past the client's own retries,
gets a timer here instead. Timers live in this process only: after a restart the initial listing
brings every job back, and a job that is still waiting is tried again then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager

log = logging.getLogger("grpo_operator.retries")


class Retries:
    """At most one pending retry per key; the newest schedule wins."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, asyncio.Task] = {}

    def schedule(self, key: Hashable, delay: float, attempt: Callable[[], Awaitable[None]]) -> None:
        self.cancel(key)
        task = asyncio.get_running_loop().create_task(self._later(key, delay, attempt), name=f"retry {key}")
        self._pending[key] = task

    def cancel(self, key: Hashable) -> None:
        task = self._pending.pop(key, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def pending(self, key: Hashable) -> bool:
        return key in self._pending

    def cancel_all(self) -> None:
        for key in list(self._pending):
            self.cancel(key)

    async def _later(self, key: Hashable, delay: float, attempt: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(delay)
        if self._pending.get(key) is asyncio.current_task():
            del self._pending[key]  # the attempt may schedule the next one
        try:
            await attempt()
        except Exception:  # a retry that fails must not kill the loop's other work
            log.exception("retry of %s failed", key)


class KeyedLocks:
    """One holder per key at a time; a key's lock exists only while someone holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


# One lock per GRPOJob, keyed (namespace, name). Whatever reads a job's status and writes it back (a merge
# patch of whole conditions, the phase) holds it: the GRPOJob handlers, the guardrails, status mirroring and
# the claims' timer. Without it one writer could put back what it read after another had changed it.
JOB_LOCKS = KeyedLocks()
