"""What a real node killed without `stop` leaves on the host, and its removal before the next node starts.

Killing the node's processes (a session or a CI job cut off, `kill -9` of a test run) ends them, but not what the
kernel keeps for them: the node's network namespace (bind-mounted under /run/netns) with its bridge and the node's
address, the host end of its veth with the host's address on the pod subnet, the pod range's blackhole route,
the sysctls the kubelet set, the cgroup parents it created. The next node then adds a second veth with the same
address: the host's route to the pod subnet still points at the dead node, so nothing on the host reaches the new
node's CoreDNS or its pods, and every RayJob and real-node test fails (seen in CI: 17 failures, with nothing in the
output that said why).

Each node registers what it changed (its HostChanges) under /run/grpo-devcluster/nodes, a tmpfs that is emptied
with the kernel state it describes, and removes the record at stop. Before a node starts, every registered node
with no process left in its network namespace, and whose starter is gone, is undone from its record (the sysctls
come back to their values before it). A node's namespace without a record (a node of a version before records)
and with no process in it is deleted too; the cgroup parents, the pods' namespace files and the blackhole route are
removed as well when no live node is left to use them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REGISTRY = Path("/run/grpo-devcluster/nodes")
NETNS_DIR = Path("/run/netns")
NODE_NETNS_PREFIX = "grpo-node-"


def node_links(suffix: str) -> tuple[str, str]:
    """(network namespace, host end of the veth) of the node whose names end in `suffix`."""
    return f"{NODE_NETNS_PREFIX}{suffix}", f"grpo-h{suffix}"[:15]


@dataclass(frozen=True)
class Registration:
    """A node's record: its host changes (node.HostChanges as a dict) and the process that started it."""

    changes: dict
    starter_pid: int
    starter_started: str  # /proc/<pid>/stat starttime: a reused pid is not taken for the starter

    @property
    def netns(self) -> str:
        return str(self.changes.get("netns") or "")


def process_start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def netns_inode(name: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except OSError:
        return None


def processes_in_netns(name: str) -> list[int]:
    """The pids whose network namespace is the named one (what `ip netns pids` prints)."""
    inode = netns_inode(name)
    if inode is None:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def is_stale(netns_exists: bool, netns_has_processes: bool, starter_alive: bool) -> bool:
    """A registered node is dead when nothing runs in its namespace and its starter is gone (a starter still
    running may be between registering and starting the namespace's first process)."""
    if netns_exists and netns_has_processes:
        return False
    return not starter_alive


def register(changes: dict) -> Path:
    REGISTRY.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    record = Registration(changes, pid, process_start_time(pid) or "")
    path = REGISTRY / f"{record.netns}.json"
    path.write_text(json.dumps(asdict(record)))
    return path


def unregister(netns: str) -> None:
    (REGISTRY / f"{netns}.json").unlink(missing_ok=True)


def registrations() -> list[tuple[Path, Registration]]:
    found = []
    for path in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            found.append((path, Registration(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            path.unlink(missing_ok=True)  # half-written by a process killed while writing it
    return found


def _starter_alive(record: Registration) -> bool:
    return process_start_time(record.starter_pid) == record.starter_started != ""


def remove_leftovers(undo, pod_range: str, cgroup_parents: list[Path], log=sys.stderr) -> list[str]:
    """Undo every dead node (see the module's docstring); `undo(changes_dict)` is node.undo_host_changes on a
    record. Returns what was removed, one line each."""
    removed: list[str] = []
    for path, record in registrations():
        exists = netns_inode(record.netns) is not None
        if is_stale(exists, bool(exists and processes_in_netns(record.netns)), _starter_alive(record)):
            undo(record.changes)
            path.unlink(missing_ok=True)
            removed.append(f"the node {record.netns} (recorded): namespace, veth, sysctls, cgroups")
    registered = {record.netns for _, record in registrations()}
    for entry in sorted(NETNS_DIR.glob(f"{NODE_NETNS_PREFIX}*")) if NETNS_DIR.is_dir() else []:
        if entry.name not in registered and not processes_in_netns(entry.name):
            # The host end first: deleting the namespace takes it too, but later (the kernel cleans a namespace
            # up in the background), and a new node's veth gets the same address meanwhile.
            _, veth = node_links(entry.name.removeprefix(NODE_NETNS_PREFIX))
            subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", entry.name], capture_output=True, check=False)
            removed.append(f"the node namespace {entry.name} (unrecorded, no process in it)")
    if not (NETNS_DIR.is_dir() and any(NETNS_DIR.glob(f"{NODE_NETNS_PREFIX}*"))):
        removed += _remove_shared_leftovers(pod_range, cgroup_parents)
    for line in removed:
        print(f"[real node] removed what a node killed without stop left: {line}", file=log, flush=True)
    return removed


def _remove_shared_leftovers(pod_range: str, cgroup_parents: list[Path]) -> list[str]:
    """With no node left: the pods' namespace files, empty cgroup parents and the blackhole route."""
    removed = []
    for entry in sorted(NETNS_DIR.glob("cni-*")) if NETNS_DIR.is_dir() else []:
        subprocess.run(["ip", "netns", "del", entry.name], capture_output=True, check=False)
        removed.append(f"the pod namespace {entry.name}")
    for parent in cgroup_parents:
        if parent.is_dir() and not _has_processes(parent) and not remove_cgroup_tree(parent):
            removed.append(f"the cgroup {parent}")
    routes = subprocess.run(["ip", "route", "show", pod_range], capture_output=True, text=True, check=False).stdout
    if "blackhole" in routes:
        subprocess.run(["ip", "route", "del", "blackhole", pod_range], capture_output=True, check=False)
        removed.append(f"the blackhole route of {pod_range}")
    return removed


def _has_processes(cgroup: Path) -> bool:
    for procs in cgroup.glob("**/cgroup.procs"):
        try:
            if procs.read_text().strip():
                return True
        except OSError:
            continue
    return False


def remove_cgroup_tree(cgroup: Path) -> list[str]:
    """rmdir the cgroup and every cgroup under it, deepest first; returns what could not go. A cgroup goes only once
    its processes are gone, which the kernel takes a moment to see after they were killed: each is tried for 5 s."""
    if not cgroup.is_dir():
        return []
    below = sorted((d for d in cgroup.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
    return [problem for directory in (*below, cgroup) if (problem := _rmdir(directory)) is not None]


def _rmdir(directory: Path) -> str | None:
    error: OSError | None = None
    for _ in range(50):
        try:
            directory.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            error = exc
            time.sleep(0.1)
    return f"cgroup {directory}: {error}"
