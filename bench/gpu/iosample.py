"""The machine's disk reads and CPU time, sampled once a second while a run goes (a start-up's cold reads).

    with IoSampler(out / "ours.io.jsonl"):
        run(...)

Each line: seconds since the start, the kernel's counters (/proc/vmstat pgpgin in KiB read from block
devices, pgmajfault; /proc/stat's CPU jiffies by kind; /proc/meminfo Cached and MemTotal in KiB).
`summarize` turns them into what was read, and how much of the CPU waited on the disk, up to a time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_counters(proc: Path = Path("/proc")) -> dict[str, int]:
    vmstat = dict(line.split() for line in (proc / "vmstat").read_text().splitlines())
    cpu = (proc / "stat").read_text().splitlines()[0].split()[1:]
    rows = (line.split() for line in (proc / "meminfo").read_text().splitlines())
    meminfo = {k.rstrip(":"): int(v) for k, v, *_ in rows}
    counters = {"pgpgin": int(vmstat["pgpgin"]), "pgmajfault": int(vmstat["pgmajfault"])}
    counters |= {f"cpu_{name}": int(v) for name, v in zip(CPU_FIELDS, cpu, strict=False)}
    counters |= {"cached_kib": meminfo["Cached"], "mem_total_kib": meminfo["MemTotal"]}
    return counters


def summarize(samples: Sequence[dict[str, Any]], until_s: float | None = None) -> dict[str, float]:
    """Pure: between the first sample and the last one at or before until_s: MiB read from disk, major
    faults, and the share of CPU time that was busy and that waited on the disk (iowait)."""
    window = [s for s in samples if until_s is None or s["t"] <= until_s]
    if len(window) < 2:
        return {}
    a, b = window[0], window[-1]

    def delta(key: str) -> int:
        return int(b[key]) - int(a[key])

    total = sum(delta(f"cpu_{f}") for f in CPU_FIELDS) or 1
    busy = total - delta("cpu_idle") - delta("cpu_iowait")
    return {
        "seconds": round(b["t"] - a["t"], 1),
        "read_mib": round(delta("pgpgin") / 1024, 1),
        "major_faults": delta("pgmajfault"),
        "cpu_busy_share": round(busy / total, 3),
        "cpu_iowait_share": round(delta("cpu_iowait") / total, 3),
        "cached_gib_end": round(int(b["cached_kib"]) / (1 << 20), 2),
        "mem_total_gib_end": round(int(b["mem_total_kib"]) / (1 << 20), 1),
    }


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class IoSampler:
    """Writes one line of counters a second to `path` from a thread, while the `with` block runs."""

    def __init__(self, path: Path, period_s: float = 1.0) -> None:
        self.path, self.period_s = path, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        start = time.monotonic()
        with self.path.open("w") as f:
            while True:
                f.write(json.dumps({"t": round(time.monotonic() - start, 2), **read_counters()}) + "\n")
                f.flush()
                if self._stop.wait(self.period_s):
                    return

    def __enter__(self) -> IoSampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
