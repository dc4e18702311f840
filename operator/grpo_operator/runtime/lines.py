"""The lines of a chunked HTTP body: a watch answers with one JSON event per line, of any length."""

from __future__ import annotations

from collections.abc import AsyncIterator


def split_lines(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """Whole lines of a watch stream (one JSON event each) and the partial line left for the next chunk."""
    *lines, rest = (buffer + chunk).split(b"\n")
    return [line for line in lines if line.strip()], rest


async def lines_of(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a chunked HTTP body, whatever their length (aiohttp's readline stops at 64 KiB)."""
    rest = b""
    async for chunk in chunks:
        lines, rest = split_lines(rest, chunk)
        for line in lines:
            yield line
    if rest.strip():
        yield rest
