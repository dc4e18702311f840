"""Dependency lookups shared by concurrent jobs; only what was found is remembered, briefly."""

from __future__ import annotations

import asyncio

from grpo_operator.runtime.lookups import SharedLookups


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counting_fetch(answer: object, calls: list[int], delay: float = 0.01):
    async def fetch() -> object:
        calls.append(1)
        await asyncio.sleep(delay)
        return answer

    return fetch


def test_concurrent_askers_share_one_request() -> None:
    async def scenario() -> tuple[list[object], int]:
        lookups, calls = SharedLookups[bool](5.0), []
        fetch = counting_fetch(True, calls)
        answers = await asyncio.gather(*(lookups.lookup(("ns", "models"), fetch, keep=bool) for _ in range(50)))
        return answers, len(calls)

    assert asyncio.run(scenario()) == ([True] * 50, 1)


def test_a_found_object_is_remembered_for_a_while_then_asked_again() -> None:
    async def scenario() -> int:
        clock, calls = Clock(), []
        lookups = SharedLookups[bool](5.0, clock=clock)
        fetch = counting_fetch(True, calls, delay=0)
        await lookups.lookup("k", fetch, keep=bool)
        clock.now = 4.9
        await lookups.lookup("k", fetch, keep=bool)
        clock.now = 10.0
        await lookups.lookup("k", fetch, keep=bool)
        return len(calls)

    assert asyncio.run(scenario()) == 2


def test_missing_is_never_answered_from_memory() -> None:
    async def scenario() -> int:
        lookups, calls = SharedLookups[bool](5.0), []
        fetch = counting_fetch(False, calls, delay=0)
        for _ in range(3):
            assert await lookups.lookup("k", fetch, keep=bool) is False
        return len(calls)

    assert asyncio.run(scenario()) == 3


def test_a_failed_request_fails_its_waiters_and_is_not_remembered() -> None:
    async def scenario() -> tuple[list[object], bool]:
        lookups = SharedLookups[bool](5.0)

        async def broken() -> bool:
            await asyncio.sleep(0.01)
            raise ConnectionError("apiserver gone")

        results = await asyncio.gather(*(lookups.lookup("k", broken, keep=bool) for _ in range(3)),
                                       return_exceptions=True)
        again = await lookups.lookup("k", counting_fetch(True, [], delay=0), keep=bool)
        return results, again

    results, again = asyncio.run(scenario())
    assert all(isinstance(r, ConnectionError) for r in results)
    assert again is True


def test_remembering_can_be_off() -> None:
    async def scenario() -> int:
        lookups, calls = SharedLookups[bool](0.0), []
        for _ in range(2):
            await lookups.lookup("k", counting_fetch(True, calls, delay=0), keep=bool)
        return len(calls)

    assert asyncio.run(scenario()) == 2
