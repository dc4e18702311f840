"""The network rule's checker on /proc/net tables as the kernel writes them (grpo_devcluster.netcheck)."""

from __future__ import annotations

import ipaddress
import os
import socket

from grpo_devcluster import netcheck

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
RUN_RANGES = (ipaddress.ip_network("10.244.0.0/24"), ipaddress.ip_network("10.244.1.0/24"))


def _line(local: str, remote: str, state: str, inode: int) -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0\n"


def test_ipv4_and_ipv6_addresses_are_read_in_the_kernels_word_order() -> None:
    table = (HEADER + _line("0100007F:1F90", "00000000:0000", "0A", 11)
             + _line("0A00F40A:0035", "0100F40A:A2C4", "01", 12))
    listening, connected = netcheck.parse_table(table, "tcp")
    assert listening.local == (ipaddress.ip_address("127.0.0.1"), 8080) and listening.listening
    assert connected.local == (ipaddress.ip_address("10.244.0.10"), 53)
    assert connected.remote == (ipaddress.ip_address("10.244.0.1"), 41668) and connected.connected
    v6 = HEADER + _line("00000000000000000000000001000000:0050", "0000000000000000FFFF00000100007F:1F90", "01", 13)
    (sock,) = netcheck.parse_table(v6, "tcp6")
    assert sock.local[0] == ipaddress.ip_address("::1")
    assert sock.remote[0] == ipaddress.ip_address("127.0.0.1")  # v4-mapped, judged as the IPv4 address


def _sock(remote: str, local: str = "127.0.0.1", protocol: str = "udp", state: str = "01") -> netcheck.Socket:
    return netcheck.Socket(protocol, (ipaddress.ip_address(local), 1), (ipaddress.ip_address(remote), 53), state, 7)


def test_a_peer_outside_loopback_and_the_runs_ranges_is_a_violation_in_any_namespace() -> None:
    outside = _sock("198.51.100.7", local="10.244.0.12")
    for run_namespace in (True, False):
        (problem,) = netcheck.violations([outside], RUN_RANGES, run_namespace)
        assert "198.51.100.7" in problem
    assert netcheck.violations([_sock("10.244.1.1"), _sock("127.0.0.53")], RUN_RANGES, True) == []


def test_listening_beyond_loopback_is_allowed_only_inside_the_runs_namespaces() -> None:
    wide = netcheck.Socket("tcp", (ipaddress.ip_address("0.0.0.0"), 8265), (ipaddress.ip_address("0.0.0.0"), 0),
                           netcheck.TCP_LISTEN, 9)
    assert netcheck.violations([wide], RUN_RANGES, run_namespace=True) == []
    (problem,) = netcheck.violations([wide], RUN_RANGES, run_namespace=False)
    assert "listening beyond loopback" in problem


def test_the_hosts_own_sockets_are_found_by_what_a_process_holds() -> None:
    """A socket this test opens shows up in its own namespace's table with the inode its fd points to."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        inodes = netcheck.socket_inodes(os.getpid())
        mine = [s for s in netcheck.namespace_sockets(os.getpid()) if s.inode in inodes]
        assert (ipaddress.ip_address("127.0.0.1"), server.getsockname()[1]) in [s.local for s in mine]
        report = netcheck.check([os.getpid()], [os.getpid()], RUN_RANGES)
    assert report.problems == [] and report.sockets >= 1
