"""The heap-trimming task: glibc's malloc_trim found and called on its interval, off when asked."""

from __future__ import annotations

import asyncio
import itertools
import platform

import pytest
from grpo_operator.runtime import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_and_callable_on_glibc() -> None:
    trim = memory.malloc_trim()
    assert trim is not None
    assert trim() in (0, 1)  # 1: memory was released, 0: there was none to release


def test_trim_runs_on_its_interval_until_cancelled() -> None:
    calls: list[float] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(memory.trim_heap_forever(0.01, lambda: calls.append(loop.time())))
        deadline = loop.time() + 30  # a busy machine delays the timer; the test waits for the calls, not a time
        while len(calls) < 3 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert len(calls) >= 3
    assert all(b > a for a, b in itertools.pairwise(calls))


def test_interval_zero_turns_trimming_off() -> None:
    async def scenario() -> object:
        return memory.start_trimming(0)

    assert asyncio.run(scenario()) is None
