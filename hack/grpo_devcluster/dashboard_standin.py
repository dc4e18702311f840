"""A loopback stand-in for the Ray dashboard's job REST API, which KubeRay polls.

KubeRay's RayJob controller asks `http://<head-svc>.<ns>.svc.cluster.local:8265/api/jobs/<id>` for
the job's status. There is no Ray here, and that address must never be dialled, so KubeRay runs
with HTTP_PROXY pointing at this server: Go's HTTP client then sends the request, absolute URL and
all, to 127.0.0.1. Tests choose each RayJob's outcome through the control endpoints under `/-/`.

A RayCluster on the real node has a real dashboard: given `--cluster-dns`, the stand-in asks the
node's CoreDNS for the head Service's address, and when it is a pod of the real node
(`--real-pods`, the node's pod subnet) it relays the request there unchanged. Names of KWOK's
simulated clusters resolve to loopback pod IPs and are answered here as before.

Run: python -m grpo_devcluster.dashboard_standin --port 18265 [--running-seconds 5]
         [--cluster-dns 10.244.0.1 --real-pods 10.244.0.0/24]
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import random
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
STATUSES = TERMINAL | {"PENDING", "RUNNING"}


@dataclass
class Outcome:
    """What a RayJob's Ray job reports: `status` once `after_seconds` passed since its first poll."""

    status: str = "SUCCEEDED"
    message: str = "Job finished successfully (simulated by grpo-devcluster)."
    after_seconds: float = 5.0


def dns_query(name: str, qid: int) -> bytes:
    """A DNS query for the A record of `name` (RFC 1035 wire format, recursion desired)."""
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + struct.pack(">HH", 1, 1)


def dns_answer_addresses(response: bytes, qid: int) -> list[str]:
    """The IPv4 addresses in a DNS response's answer section (none for NXDOMAIN or another id)."""
    if len(response) < 12:
        return []
    rid, flags, qdcount, ancount = struct.unpack(">HHHH", response[:8])
    if rid != qid or flags & 0x000F:
        return []
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(response, offset) + 4
    addresses = []
    for _ in range(ancount):
        offset = _skip_name(response, offset)
        rtype, _rclass, _ttl, length = struct.unpack(">HHIH", response[offset:offset + 10])
        offset += 10
        if rtype == 1 and length == 4:
            addresses.append(socket.inet_ntoa(response[offset:offset + 4]))
        offset += length
    return addresses


def _skip_name(data: bytes, offset: int) -> int:
    while data[offset]:
        if data[offset] & 0xC0 == 0xC0:  # a compression pointer ends the name
            return offset + 2
        offset += data[offset] + 1
    return offset + 1


class DnsUnavailable(OSError):
    """The real node's CoreDNS did not answer: whether the name is a real pod's is unknown."""


@dataclass
class ClusterDns:
    """The real node's CoreDNS, asked which pod serves a Service name; answers kept a few seconds."""

    server: str
    real_pods: ipaddress.IPv4Network
    ttl: float = 5.0
    port: int = 53
    attempts: int = 3
    cache: dict[str, tuple[float, str | None]] = field(default_factory=dict)

    def real_pod(self, host: str) -> str | None:
        """The real pod's IP behind `host` (a `*.svc.cluster.local` name), or None (a simulated cluster's
        name). Raises DnsUnavailable when CoreDNS does not answer: on a loaded machine a lost or late reply
        taken for "simulated" made a real RayJob's Ray job look SUCCEEDED (the stand-in's default)."""
        name = host.split(":", 1)[0]
        if not name.endswith(".svc.cluster.local"):
            return None
        now = time.monotonic()
        cached = self.cache.get(name)
        if cached and now - cached[0] < self.ttl:
            return cached[1]
        addresses = self._resolve(name)
        found = next((a for a in addresses if ipaddress.ip_address(a) in self.real_pods), None)
        self.cache[name] = (now, found)
        return found

    def _resolve(self, name: str) -> list[str]:
        for _ in range(self.attempts):
            qid = random.randrange(1, 0xFFFF)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(1.0)
                try:
                    sock.sendto(dns_query(name, qid), (self.server, self.port))
                    return dns_answer_addresses(sock.recv(4096), qid)
                except OSError:
                    continue
        raise DnsUnavailable(f"{self.server}:{self.port} did not answer for {name} ({self.attempts} tries)")


@dataclass
class StandinState:
    default: Outcome = field(default_factory=Outcome)
    dns: ClusterDns | None = None
    # One outcome per attempt: KubeRay submits a new Ray job (new id) for each retry of a RayJob;
    # the last outcome holds for any later attempt.
    outcomes: dict[tuple[str, str], Outcome | list[Outcome]] = field(default_factory=dict)
    attempts: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    first_seen: dict[str, float] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    requests: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def rayjob_of(job_id: str) -> str:
    """KubeRay names a RayJob's Ray job `<rayjob>-<5 random chars>`."""
    return job_id.rsplit("-", 1)[0] if "-" in job_id else job_id


def namespace_of(host: str) -> str:
    """`<head-svc>.<namespace>.svc.cluster.local[:port]` → namespace; '' if the host has another shape."""
    parts = host.split(":", 1)[0].split(".")
    return parts[1] if len(parts) >= 3 and parts[2] == "svc" else ""


def job_info(state: StandinState, namespace: str, job_id: str, now: float) -> dict:
    """The JSON body of `GET /api/jobs/<id>`, in the shape of Ray's JobDetails."""
    with state.lock:
        first = state.first_seen.setdefault(job_id, now)
        key = (namespace, rayjob_of(job_id))
        ids = state.attempts.setdefault(key, [])
        if job_id not in ids:
            ids.append(job_id)
        chosen = state.outcomes.get(key, state.default)
        sequence = chosen if isinstance(chosen, list) else [chosen]
        outcome = sequence[min(ids.index(job_id), len(sequence) - 1)]
        stopped = job_id in state.stopped
    start_ms = int(first * 1000)
    if stopped:
        status, message, end_ms = "STOPPED", "Job was stopped.", int(now * 1000)
    elif now - first >= outcome.after_seconds:
        status, message = outcome.status, outcome.message
        end_ms = int((first + outcome.after_seconds) * 1000) if status in TERMINAL else 0
    else:
        status, message, end_ms = "RUNNING", "Job is running (simulated by grpo-devcluster).", 0
    info = {"job_id": job_id, "submission_id": job_id, "status": status, "message": message,
            "entrypoint": "", "start_time": start_ms, "type": "SUBMISSION"}
    if end_ms:
        info["end_time"] = end_ms
    if status == "FAILED":
        info["error_type"] = "JOB_ENTRYPOINT_COMMAND_ERROR"
    return info


class _Handler(BaseHTTPRequestHandler):
    state: StandinState  # set on the subclass made by make_server

    def log_message(self, format: str, *args) -> None:  # quiet: the request log is kept in state
        return

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _target(self) -> tuple[str, str]:
        url = urlsplit(self.path)
        return (url.netloc or self.headers.get("Host", "")), url.path

    def _record(self, host: str, path: str) -> None:
        with self.state.lock:
            self.state.requests.append({"method": self.command, "host": host, "path": path})
            del self.state.requests[:-1000]

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _relayed(self, host: str) -> bool:
        """Relay the request to the real dashboard when `host` is a real pod's; True if it was."""
        dns = self.state.dns
        try:
            pod_ip = dns.real_pod(host) if dns is not None else None
        except DnsUnavailable as exc:  # KubeRay takes an error for "ask again", never for a job's status
            self._send(503, {"error": str(exc)})
            return True
        if pod_ip is None:
            return False
        port = int(host.split(":", 1)[1]) if ":" in host else 80
        url = urlsplit(self.path)
        target = url.path + (f"?{url.query}" if url.query else "")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        try:
            upstream = http.client.HTTPConnection(pod_ip, port, timeout=30)
            upstream.request(self.command, target, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError as exc:
            self._send(502, {"error": f"real dashboard at {pod_ip}:{port} unreachable: {exc}"})
            return True
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()
        return True

    def do_GET(self) -> None:
        host, path = self._target()
        if path.startswith("/-/"):
            return self._control_get(path)
        self._record(host, path)
        if self._relayed(host):
            return
        if path.rstrip("/") == "/api/jobs":
            with self.state.lock:
                ids = list(self.state.first_seen)
            return self._send(200, [job_info(self.state, namespace_of(host), i, time.time()) for i in ids])
        if path.startswith("/api/jobs/"):
            job_id = path.removeprefix("/api/jobs/").strip("/")
            return self._send(200, job_info(self.state, namespace_of(host), job_id, time.time()))
        if path == "/api/version":
            return self._send(200, {"version": "standin", "ray_version": "2.52.1"})
        self._send(404, {"error": f"no such endpoint {path}"})

    def do_POST(self) -> None:
        host, path = self._target()
        self._record(host, path)
        if self._relayed(host):
            return
        if path.startswith("/api/jobs/") and path.endswith("/stop"):
            job_id = path.removeprefix("/api/jobs/").removesuffix("/stop").strip("/")
            with self.state.lock:
                self.state.stopped.add(job_id)
            return self._send(200, {"stopped": True})
        if path.rstrip("/") == "/api/jobs":
            body = self._body()
            job_id = body.get("submission_id") or "standin-job"
            with self.state.lock:
                self.state.first_seen.setdefault(job_id, time.time())
            return self._send(200, {"job_id": job_id, "submission_id": job_id})
        self._send(404, {"error": f"no such endpoint {path}"})

    def do_DELETE(self) -> None:
        host, path = self._target()
        self._record(host, path)
        if self._relayed(host):
            return
        self._send(200, {"deleted": True})

    def do_PUT(self) -> None:
        """Body: one outcome {status, message, afterSeconds}, or {"attempts": [outcome, ...]} per retry."""
        _, path = self._target()
        try:
            body = self._body()
            outcomes = [_outcome(o) for o in body["attempts"]] if "attempts" in body else [_outcome(body)]
        except (ValueError, TypeError, KeyError) as exc:
            return self._send(400, {"error": f"bad outcome: {exc}"})
        if not outcomes or any(o.status not in STATUSES for o in outcomes):
            return self._send(400, {"error": f"status must be one of {sorted(STATUSES)}"})
        parts = path.strip("/").split("/")
        with self.state.lock:
            if parts == ["-", "default"]:
                self.state.default = outcomes[0]
            elif len(parts) == 4 and parts[:2] == ["-", "outcomes"]:
                self.state.outcomes[(parts[2], parts[3])] = outcomes
            else:
                return self._send(404, {"error": "PUT /-/default or /-/outcomes/<namespace>/<rayjob>"})
        self._send(200, asdict(outcomes[0]) if len(outcomes) == 1 else {"attempts": [asdict(o) for o in outcomes]})

    def _control_get(self, path: str) -> None:
        with self.state.lock:
            if path == "/-/requests":
                return self._send(200, list(self.state.requests))
            if path == "/-/healthz":
                return self._send(200, {"ok": True})
        self._send(404, {"error": f"no such control endpoint {path}"})


def _outcome(body: dict) -> Outcome:
    return Outcome(status=body.get("status", "SUCCEEDED"), message=body.get("message", Outcome.message),
                   after_seconds=float(body.get("afterSeconds", 0)))


def make_server(port: int, default: Outcome | None = None, dns: ClusterDns | None = None) -> ThreadingHTTPServer:
    state = StandinState(default=default or Outcome(), dns=dns)
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--running-seconds", type=float, default=5.0,
                        help="how long a Ray job reports RUNNING before its outcome (default 5)")
    parser.add_argument("--default-status", default="SUCCEEDED", choices=sorted(TERMINAL | {"RUNNING"}))
    parser.add_argument("--cluster-dns", default=None, help="the real node's CoreDNS address")
    parser.add_argument("--real-pods", default=None, help="the real node's pod subnet, e.g. 10.244.0.0/24")
    args = parser.parse_args(argv)
    default = Outcome(status=args.default_status, after_seconds=args.running_seconds)
    dns = ClusterDns(args.cluster_dns, ipaddress.ip_network(args.real_pods)) if args.cluster_dns else None
    make_server(args.port, default, dns).serve_forever()


if __name__ == "__main__":
    main()
