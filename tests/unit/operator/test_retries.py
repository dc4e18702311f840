"""Retry timers and per-job serialisation of the GRPOJob handler's work."""

from __future__ import annotations

import asyncio

from grpo_operator.reconcile.retries import KeyedLocks, Retries


async def settled(deadline_s: float = 30) -> None:
    """Wait until every other task of the loop has finished (or been cancelled): then whatever would run, ran.
    Waiting for the tasks, not for a time, holds on a busy machine too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while others := [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]:
        assert loop.time() < deadline, f"tasks still running after {deadline_s}s: {others}"
        await asyncio.wait(others, timeout=1)


def test_a_newer_schedule_replaces_the_pending_retry() -> None:
    async def scenario() -> list[str]:
        ran: list[str] = []
        retries = Retries()

        async def attempt(label: str) -> None:
            ran.append(label)

        retries.schedule("job", 0.05, lambda: attempt("first"))
        retries.schedule("job", 0.01, lambda: attempt("second"))
        await settled()
        assert not retries.pending("job")
        return ran

    assert asyncio.run(scenario()) == ["second"]


def test_a_cancelled_retry_does_not_run_and_an_attempt_may_schedule_the_next() -> None:
    async def scenario() -> tuple[list[int], bool]:
        ran: list[int] = []
        retries = Retries()

        async def attempt() -> None:
            ran.append(len(ran))
            if len(ran) < 3:
                retries.schedule("job", 0.0, attempt)

        retries.schedule("other", 0.01, attempt)
        retries.cancel("other")
        retries.schedule("job", 0.0, attempt)
        await settled()
        return ran, retries.pending("job")

    assert asyncio.run(scenario()) == ([0, 1, 2], False)


def test_a_failing_attempt_is_logged_not_raised(caplog) -> None:
    async def scenario() -> None:
        retries = Retries()

        async def attempt() -> None:
            raise RuntimeError("apiserver gone")

        retries.schedule("job", 0.0, attempt)
        await settled()

    asyncio.run(scenario())
    assert "apiserver gone" in caplog.text


def test_keyed_locks_serialise_one_key_and_forget_it_afterwards() -> None:
    async def scenario() -> tuple[list[str], int]:
        locks, order = KeyedLocks(), []

        async def work(key: str, label: str) -> None:
            async with locks.hold(key):
                order.append(f"{label} in")
                await asyncio.sleep(0.01)
                order.append(f"{label} out")

        await asyncio.gather(work("a", "1"), work("a", "2"), work("b", "3"))
        return order, len(locks)

    order, held = asyncio.run(scenario())
    assert order.index("1 out") < order.index("2 in")  # same key: one after the other
    assert order.index("3 in") < order.index("1 out")  # another key: alongside
    assert held == 0
