"""The operator's memory: the heap's free pages handed back to the OS (glibc's malloc_trim, every few seconds), the
cyclic collector tuned, asyncio's per-connection TLS buffer bounded.

A burst of GRPOJobs parses thousands of watch events and API answers; once handled, nearly all of
it is garbage, but an allocator keeps freed memory for reuse, so the operator's RSS stayed at the
burst's high-water mark. The operator image runs Python with PYTHONMALLOC=malloc (pymalloc's arenas
are only returned when entirely empty, which a long-lived object left in each one prevents), and
this task lets glibc release what is free. With 1000 jobs present: bench/operator/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

log = logging.getLogger("grpo_operator.memory")


def malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


async def trim_heap_forever(interval: float, trim: Callable[[], object]) -> None:
    while True:
        await asyncio.sleep(interval)
        trim()


def start_trimming(interval: float) -> asyncio.Task | None:
    """The trimming task on the running loop; None when disabled (interval <= 0) or unsupported."""
    trim = malloc_trim() if interval > 0 else None
    if trim is None:
        if interval > 0:
            log.info("no malloc_trim in this C library: freed memory is not handed back to the OS")
        return None
    return asyncio.get_running_loop().create_task(trim_heap_forever(interval, trim), name="grpo-heap-trim")


def tune_gc(young_threshold: int) -> None:
    """Leave what start-up created out of the cyclic collector's full collections, and collect the youngest
    generation every `young_threshold` new container objects instead of every 700 (0: Python's own).

    Parsing an API answer creates tens of thousands of dicts and lists that stay alive until the parse ends: at
    Python's 700 each such parse was collected young several times, promoted, and soon triggered a full collection,
    which walks every long-lived object in the process (the imported modules and every job's state). A namespace's
    list of 1000 claims took about twice as long to parse as with the collector off (bench/operator/RESULTS.md,
    issue 34). Frozen objects are never freed by the collector: only what start-up made, which lives as long as
    the process, is frozen, once.
    """
    gc.freeze()
    if young_threshold > 0:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(young_threshold, middle, old)


def bound_tls_read_buffer(size: int) -> None:
    """asyncio's TLS connections each read their socket into a buffer of `size` bytes instead of 256 KiB (0: leave
    Python's).

    asyncio gives every TLS connection a zero-filled 256 KiB read buffer when it opens (`SSLProtocol.max_size`), and
    in a burst kopf's and the handlers' sessions hold up to `max_connections` connections each (32 + 32: up to
    16 MiB). With 64 KiB the peak RSS of a 1000-job burst went from 156 to 149 MiB, under the 150 MiB target
    (bench/operator/RESULTS.md, tenth round, issue 34). A TLS record is at most 16 KiB, so 64 KiB still takes
    several records per read; a larger answer takes more reads, not more time worth counting.
    Set before the first connection: a connection opened before keeps its larger buffer.
    """
    if size > 0:
        asyncio.sslproto.SSLProtocol.max_size = size
