"""Start, watch and stop the component processes; every one in its own process group."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import DevClusterError


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """Ports the kernel says are free now; held open together so no two are the same."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def is_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Started:
    name: str
    pid: int
    log: Path


def start(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> Started:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **(env or {})}, start_new_session=True)
        except OSError as exc:
            raise DevClusterError(name, f"cannot start {argv[0]}: {exc}") from exc
    return Started(name, proc.pid, log)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists": reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(name: str, check: Callable[[], bool], started: Started, timeout: float) -> None:
    """Poll `check` until it is true; fail naming the component, with its log, if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(started.pid):
            raise DevClusterError(name, f"exited during start-up; last lines of {started.log}:\n"
                                  + log_tail(started.log))
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        time.sleep(0.2)
    raise DevClusterError(name, f"not ready after {timeout:.0f}s; last lines of {started.log}:\n"
                          + log_tail(started.log))


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    # No proxy: a developer's HTTP_PROXY must not capture loopback health checks.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    with opener.open(url, timeout=2) as response:
        return response.status == 200


def stop_group(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid) and not _group_has_members(pid):
                return
            time.sleep(0.1)


def kill_group(pid: int, wait: float = 10.0) -> None:
    """SIGKILL the process group at once (no grace) and wait until it is gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and (alive(pid) or _group_has_members(pid)):
        time.sleep(0.05)


def _group_has_members(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 5 (after the parenthesised command, which may contain spaces) is the pgid.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
