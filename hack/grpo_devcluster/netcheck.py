"""The network rule, checked where the sockets are: in every network namespace the run's processes live in.

The rule (README "The local control plane", "The real node"): traffic goes only to loopback, or to addresses
inside network namespaces the run itself created (the real node's and its pods'), from which nothing routes
out. A socket belongs to the network namespace it was made in, and the kernel lists it only in that
namespace's tables (/proc/<pid>/net/tcp of a process in it): reading /proc/net of the checking process, as
psutil's per-process connections do, never sees a socket of the kubelet, containerd or any pod.

So: for a namespace the run created, every socket in its tables is judged; for the host's namespace (which
other programs share), only the sockets the cluster's own processes hold (their /proc/<pid>/fd).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROTOCOLS = ("tcp", "tcp6", "udp", "udp6")
TCP_LISTEN = "0A"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Socket:
    protocol: str
    local: tuple[Address, int]
    remote: tuple[Address, int]
    state: str  # the kernel's hex state: 0A is a TCP LISTEN; an unconnected UDP socket is 07
    inode: int

    @property
    def listening(self) -> bool:
        return (self.protocol.startswith("tcp") and self.state == TCP_LISTEN) or (
            self.protocol.startswith("udp") and self.remote[0].is_unspecified)

    @property
    def connected(self) -> bool:
        return not self.remote[0].is_unspecified

    def __str__(self) -> str:
        local, remote = f"{self.local[0]}:{self.local[1]}", f"{self.remote[0]}:{self.remote[1]}"
        return f"{self.protocol} {local} -> {remote} (inode {self.inode})"


def _address(hex_address: str) -> tuple[Address, int]:
    """/proc/net's `0100007F:1F90` (IPv4, host byte order per 32-bit word) or its 32-digit IPv6 form."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    # Each 32-bit word is printed in the machine's byte order (little-endian on x86 and arm64).
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address: Address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address, int(port, 16)


def parse_table(text: str, protocol: str) -> list[Socket]:
    """The sockets of one /proc/<pid>/net/<protocol> table."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        sockets.append(Socket(protocol, _address(fields[1]), _address(fields[2]), fields[3], int(fields[9])))
    return sockets


def namespace_sockets(pid: int) -> list[Socket]:
    """Every socket of the network namespace `pid` lives in."""
    found = []
    for protocol in PROTOCOLS:
        try:
            found += parse_table(Path(f"/proc/{pid}/net/{protocol}").read_text(), protocol)
        except FileNotFoundError:
            continue  # no IPv6 in that namespace
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open."""
    inodes = set()
    try:
        entries = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def violations(sockets: Iterable[Socket], allowed: tuple[Network, ...], run_namespace: bool) -> list[str]:
    """What breaks the rule: a peer that is neither loopback nor in `allowed` (the ranges of the namespaces the
    run created); in the host's namespace (`run_namespace` False) also a listener on anything but loopback."""
    found = []
    for sock in sockets:
        peer = sock.remote[0]
        if sock.connected and not (peer.is_loopback or any(peer in net for net in allowed)):
            found.append(f"peer outside loopback and the run's namespaces: {sock}")
        if sock.listening and not run_namespace and not sock.local[0].is_loopback:
            found.append(f"listening beyond loopback in the host's namespace: {sock}")
    return found


@dataclass(frozen=True)
class Report:
    """What a check looked at and what it found, per network namespace."""

    namespaces: dict[str, int]  # namespace -> sockets judged there
    problems: list[str]

    @property
    def sockets(self) -> int:
        return sum(self.namespaces.values())


def check(host_pids: Iterable[int], namespace_pids: Iterable[int], allowed: tuple[Network, ...],
          host_namespace: str | None = None) -> Report:
    """Judge the sockets of `host_pids` (processes that may share the host's namespace with other programs:
    only the sockets they hold) and of every namespace any of `namespace_pids` lives in (all its sockets,
    when it is not the host's)."""
    host_namespace = host_namespace or netns(os.getpid())
    judged: dict[str, int] = {}
    problems: list[str] = []
    seen_namespaces: set[str] = set()
    for pid in namespace_pids:
        namespace = netns(pid)
        if namespace is None or namespace == host_namespace or namespace in seen_namespaces:
            continue
        seen_namespaces.add(namespace)
        sockets = namespace_sockets(pid)
        judged[namespace] = len(sockets)
        problems += [f"{namespace} (pid {pid}): {p}" for p in violations(sockets, allowed, run_namespace=True)]
    host_inodes: set[int] = set()
    for pid in host_pids:
        if netns(pid) == host_namespace:
            host_inodes |= socket_inodes(pid)
    if host_inodes:
        host_sockets = [s for s in namespace_sockets(os.getpid()) if s.inode in host_inodes]
        judged[f"{host_namespace} (host: the cluster's own sockets)"] = len(host_sockets)
        problems += [f"host: {p}" for p in violations(host_sockets, allowed, run_namespace=False)]
    return Report(judged, problems)
