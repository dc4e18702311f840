"""GPU memory per process during a run: which processes held the GPU, and who their parents were.

A background thread samples `nvidia-smi --query-compute-apps` and the process table (/proc) every few
seconds; bench/gpu/placement_check.py then adds up the GPU memory held under each role's Ray actors (a
vLLM server's engine runs in child processes of the server actor).
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]


def parse_compute_apps(text: str) -> dict[int, int]:
    """Pure: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> {pid: MiB}."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = out.get(int(parts[0]), 0) + int(parts[1])
    return out


def parse_stat_ppid(stat: str) -> int:
    """Pure: the parent pid from a /proc/<pid>/stat line (the command name may hold spaces and parens)."""
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def process_parents(proc: Path = Path("/proc")) -> dict[int, int]:
    parents = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = parse_stat_ppid((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):  # the process ended meanwhile
                continue
    return parents


@dataclass
class GpuWatch:
    interval_s: float = 3.0
    gpu_mib_by_pid: dict[int, int] = field(default_factory=dict)  # the most each pid held in a sample
    parents: dict[int, int] = field(default_factory=dict)  # every pid seen, and its parent
    samples: int = 0
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        try:
            out = subprocess.run(QUERY, capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            self.error = f"{type(e).__name__}: {e}"
            return
        for pid, mib in parse_compute_apps(out).items():
            self.gpu_mib_by_pid[pid] = max(mib, self.gpu_mib_by_pid.get(pid, 0))
        self.remember_parents(process_parents())
        self.samples += 1

    def remember_parents(self, parents: dict[int, int]) -> None:
        """Keep the first parent seen: when a Ray actor ends before its vLLM children, the kernel reparents
        them to pid 1, and a later sample would cut them off their role (2026-12-04's placement check)."""
        for pid, ppid in parents.items():
            self.parents.setdefault(pid, ppid)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> GpuWatch:
        self._thread = threading.Thread(target=self._loop, name="gpuwatch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def dump(self, path: Path) -> None:
        path.write_text(
            json.dumps(
                {
                    "samples": self.samples,
                    "error": self.error,
                    "gpu_mib_by_pid": {str(k): v for k, v in self.gpu_mib_by_pid.items()},
                    "parents": {str(k): v for k, v in self.parents.items()},
                }
            )
        )
