"""The handlers' client lets creation requests through before background ones, oldest job first."""

from __future__ import annotations

import asyncio

from grpo_operator.runtime.priority import BACKGROUND, CREATION, REQUEST_PRIORITY, PriorityGate, creating


def test_waiters_get_in_by_priority_then_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        gate, order = PriorityGate(1), []
        await gate.acquire((BACKGROUND, 0.0))  # the one slot is taken: everyone below waits

        async def request(label: str, priority: tuple[int, float]) -> None:
            await gate.acquire(priority)
            order.append(label)
            gate.release()

        waiting = [
            asyncio.create_task(request("status write", (BACKGROUND, 0.0))),
            asyncio.create_task(request("job 2 create", (CREATION, 2.0))),
            asyncio.create_task(request("job 1 create", (CREATION, 1.0))),
            asyncio.create_task(request("mirroring", (BACKGROUND, 0.0))),
        ]
        await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(*waiting)
        return order

    assert asyncio.run(scenario()) == ["job 1 create", "job 2 create", "status write", "mirroring"]


def test_a_free_slot_is_never_held_back() -> None:
    async def scenario() -> int:
        gate = PriorityGate(3)
        for _ in range(3):
            await asyncio.wait_for(gate.acquire((BACKGROUND, 0.0)), timeout=30)
        return gate.waiting()

    assert asyncio.run(scenario()) == 0


def test_a_cancelled_waiter_does_not_lose_the_slot() -> None:
    async def scenario() -> bool:
        gate = PriorityGate(1)
        await gate.acquire((BACKGROUND, 0.0))
        cancelled = asyncio.create_task(gate.acquire((CREATION, 0.0)))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        gate.release()
        await asyncio.wait_for(gate.acquire((BACKGROUND, 0.0)), timeout=30)  # the slot came back
        return cancelled.cancelled()

    assert asyncio.run(scenario()) is True


def test_creating_marks_the_requests_of_tasks_started_inside() -> None:
    async def scenario() -> tuple[tuple[int, float], tuple[int, float], tuple[int, float]]:
        async def seen() -> tuple[int, float]:
            return REQUEST_PRIORITY.get()

        with creating(7.0):
            inside = (await asyncio.gather(seen()))[0]
        return REQUEST_PRIORITY.get(), inside, await seen()

    outside, inside, after = asyncio.run(scenario())
    assert inside == (CREATION, 7.0)
    assert outside == after == (BACKGROUND, 0.0)
