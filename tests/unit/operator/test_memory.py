"""The heap-trimming task: glibc's malloc_trim found and called on its interval, off when asked."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import gc
import itertools
import os
import platform
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster import pki
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


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_tuning_freezes_what_exists_and_sets_only_the_young_threshold(restored_gc: object) -> None:
    before = gc.get_threshold()
    memory.tune_gc(20_000)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (20_000, *before[1:])


def test_young_threshold_zero_keeps_pythons_own(restored_gc: object) -> None:
    before = gc.get_threshold()
    memory.tune_gc(0)
    assert gc.get_threshold() == before


@pytest.fixture
def restored_tls_read_size() -> Iterator[None]:
    size = asyncio.sslproto.SSLProtocol.max_size
    yield
    asyncio.sslproto.SSLProtocol.max_size = size


def test_tls_connections_read_through_the_bounded_buffer_and_get_a_large_answer_whole(
    tmp_path: Path, restored_tls_read_size: object
) -> None:
    keys = pki.generate(tmp_path, "127.96.0.1")
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(keys.serving_cert, keys.serving_key)
    trusting = ssl.create_default_context(cafile=str(keys.ca_cert))
    answer = os.urandom(3 << 20)  # as large as a namespace's list of a thousand claims
    memory.bound_tls_read_buffer(64 * 1024)

    async def scenario() -> tuple[int, bytes]:
        async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=serving)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trusting)
        buffer = len(writer.transport._ssl_protocol._ssl_buffer)  # type: ignore[attr-defined]
        received = await reader.read()
        writer.close()
        server.close()
        await server.wait_closed()
        return buffer, received

    buffer, received = asyncio.run(scenario())
    assert buffer == 64 * 1024
    assert received == answer


def test_a_tls_read_buffer_of_zero_keeps_pythons_own(restored_tls_read_size: object) -> None:
    before = asyncio.sslproto.SSLProtocol.max_size
    memory.bound_tls_read_buffer(0)
    assert asyncio.sslproto.SSLProtocol.max_size == before == 256 * 1024
