"""`grpo-prefetch`: read the trainer's libraries into the node's page cache before the run needs them.

On a node that has not run the trainer image yet, its files are not in the page cache. Each process that
imports torch, vLLM or the CUDA libraries then waits on the disk one page fault at a time, in no useful
order, and the first vLLM engine of a machine spent half a minute more than on a warm machine (GPU
sessions d-f, bench/gpu/RESULTS.md). Reading the same files front to back, several at once, is what a
disk does fastest; this does it in the background from the pod's start, while Ray starts and the driver
is submitted.

What it reads: every file of the Python distributions the trainer runs (grpo-operator, verl and vLLM,
and everything they require, markers evaluated), shared libraries first, then the compiled Python
modules. Nothing else in site-packages: an image may carry more than the trainer needs.

KubeRay runs `grpo-prefetch --background || true` before `ray start` in every trainer pod
(render/rayjob.py); `GRPO_PREFETCH=0` in the job's env turns it off. A file that cannot be read is skipped:
this only ever makes a start faster, never stops one.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

PREFETCH_ENV = "GRPO_PREFETCH"
# The trainer's own distribution and the two it runs; the rest is what they require.
ROOTS = ("grpo-operator", "verl", "vllm")
DEFAULT_THREADS = 4
# Large reads keep the disk's queue full with few system calls; one buffer per thread.
READ_SIZE = 8 << 20
SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
LOG_PREFIX = "grpo-prefetch: "


def canonical(name: str) -> str:
    """Pure: a distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def needed(requires_dist: Iterable[str], extras: Iterable[str] = ()) -> list[Requirement]:
    """Pure: the requirements that apply here, to the distribution itself or to one of the extras it was
    asked for with (markers evaluated; a line that does not parse is left out)."""
    environments = [{"extra": e} for e in ("", *extras)]
    found: list[Requirement] = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or any(req.marker.evaluate(env) for env in environments):
            found.append(req)
    return found


def requirement_closure(roots: Sequence[str], requires_dist: Mapping[str, Sequence[str]]) -> list[str]:
    """Pure: the installed distributions reachable from roots, breadth first (what is imported first comes
    first). `requires_dist` maps each installed distribution's canonical name to its Requires-Dist lines;
    a requirement's extras count (torch needs `cuda-toolkit[cublas]`, and so cuda-toolkit's cublas extra);
    roots and requirements that are not installed are left out."""
    order: list[str] = []
    visited: dict[str, set[str]] = {}
    frontier: list[tuple[str, frozenset[str]]] = [(canonical(r), frozenset()) for r in roots]
    while frontier:
        following: list[tuple[str, frozenset[str]]] = []
        for name, extras in frontier:
            if name not in requires_dist:
                continue
            done = visited.get(name)
            if done is not None and extras <= done:
                continue
            if done is None:
                order.append(name)
                done = visited[name] = set()
            done |= extras
            following += [(canonical(r.name), frozenset(r.extras)) for r in needed(requires_dist[name], extras)]
        frontier = following
    return order


@dataclass(frozen=True)
class ReadPlan:
    """Files in the order they are read: every shared library first (the bulk of the bytes, and what a
    cold import faults in page by page), then the Python modules, compiled where a .pyc exists."""

    libraries: tuple[Path, ...]
    modules: tuple[Path, ...]

    @property
    def files(self) -> tuple[Path, ...]:
        return self.libraries + self.modules


def plan_reads(files_in_order: Iterable[Path], compiled: Callable[[Path], Path | None]) -> ReadPlan:
    """Pure given `compiled` (a .py file's .pyc when there is one): the read plan of these files."""
    libraries: list[Path] = []
    modules: list[Path] = []
    seen: set[Path] = set()
    for path in files_in_order:
        if path in seen:
            continue
        seen.add(path)
        if SHARED_LIBRARY.search(path.name):
            libraries.append(path)
        elif path.suffix == ".py":
            # an import reads the .pyc when it is current; the .py only when there is none
            modules.append(compiled(path) or path)
    return ReadPlan(tuple(libraries), tuple(modules))


def existing_pyc(source: Path) -> Path | None:
    pyc = Path(importlib.util.cache_from_source(str(source)))
    return pyc if pyc.is_file() else None


def installed_distributions() -> dict[str, importlib.metadata.Distribution]:
    """Canonical name -> the distribution an import would find (the first on sys.path)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist)
    return found


def trainer_files(roots: Sequence[str] = ROOTS) -> list[Path]:
    """Every recorded file of the trainer's distributions, distribution by distribution in closure order."""
    dists = installed_distributions()
    requires_dist = {name: d.requires or [] for name, d in dists.items()}
    files: list[Path] = []
    for name in requirement_closure(roots, requires_dist):
        recorded = dists[name].files or []  # a distribution without a RECORD lists nothing
        files.extend(Path(str(dists[name].locate_file(f))) for f in recorded)
    return files


@dataclass
class Tally:
    files: int = 0
    bytes: int = 0
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, nbytes: int | None) -> None:
        with self.lock:
            if nbytes is None:
                self.failed += 1
            else:
                self.files += 1
                self.bytes += nbytes


def read_through(path: Path, buffer: bytearray) -> int | None:
    """Reads the whole file into the page cache (the bytes are dropped); None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        # a larger read-ahead window for a file read front to back
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        total = 0
        while n := os.readv(fd, [buffer]):
            total += n
        return total
    except OSError:
        return None
    finally:
        os.close(fd)


def read_all(paths: Sequence[Path], threads: int) -> Tally:
    """Reads the files with `threads` readers taking them in order; returns what was read."""
    todo: queue.SimpleQueue[Path] = queue.SimpleQueue()
    for p in paths:
        todo.put(p)
    tally = Tally()

    def reader() -> None:
        buffer = bytearray(READ_SIZE)
        while True:
            try:
                path = todo.get_nowait()
            except queue.Empty:
                return
            tally.add(read_through(path, buffer))

    workers = [threading.Thread(target=reader, daemon=True) for _ in range(max(1, threads))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return tally


def describe(label: str, tally: Tally, seconds: float) -> str:
    """Pure: one log line for a tier that was read."""
    gib = tally.bytes / (1 << 30)
    rate = tally.bytes / (1 << 20) / seconds if seconds > 0 else 0.0
    unread = f", {tally.failed} unreadable" if tally.failed else ""
    return f"{label}: {gib:.2f} GiB in {tally.files} files in {seconds:.1f} s ({rate:.0f} MiB/s){unread}"


def prefetch(plan: ReadPlan, threads: int, say: Callable[[str], None]) -> None:
    started = time.monotonic()
    for label, paths in (("shared libraries", plan.libraries), ("python modules", plan.modules)):
        tier_started = time.monotonic()
        tally = read_all(paths, threads)
        say(LOG_PREFIX + describe(label, tally, time.monotonic() - tier_started))
    say(f"{LOG_PREFIX}done in {time.monotonic() - started:.1f} s")


def is_off(environ: Mapping[str, str]) -> bool:
    return environ.get(PREFETCH_ENV, "1").strip() == "0"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="grpo-prefetch", description=__doc__.split("\n\n")[0])
    p.add_argument("--background", action="store_true",
                   help="start the reading in a process of its own and return at once")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="files read at once")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if is_off(os.environ):
        say(f"{LOG_PREFIX}off ({PREFETCH_ENV}=0)")
        return 0
    if args.background:
        # a session of its own: the pod's `ray start` is not its parent's child and does not wait for it
        subprocess.Popen(
            [sys.executable, "-m", "grpo_trainer.library_prefetch", "--threads", str(args.threads)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return 0
    listed = time.monotonic()
    plan = plan_reads(trainer_files(), existing_pyc)
    say(f"{LOG_PREFIX}{len(plan.libraries)} shared libraries and {len(plan.modules)} python modules "
        f"to read (listed in {time.monotonic() - listed:.1f} s), {args.threads} at a time")
    prefetch(plan, args.threads, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
