"""A Ray cluster of one or more nodes on this one machine, started with `ray start` as KubeRay starts pods.

Each node is one `ray start --block` process in a process group of its own, so `stop()` ends this cluster
and nothing else on the machine (`ray stop` would end every Ray process, other runs' too). Nodes declare
what our pods declare (operator/grpo_operator/render/rayjob.py): the head no GPU, each worker group its
GPUs and the custom resource `grpo.dev/<role>`. On a one-GPU machine every worker node declares that
same GPU; Ray then gives each node's GPU actors CUDA_VISIBLE_DEVICES=0, the one physical device.

Several clusters (and several nodes of one cluster) share the machine's ports: each node gets its own
dashboard-agent port, worker ports picked by the OS, and workers do not start a second log monitor.

Token authentication is off (RAY_AUTH_MODE=disabled) for the cluster and every process that joins it:
Ray turns it on by itself when ~/.ray/auth_token exists, and a driver started without the token is refused.

`reserve_job_number(k)` connects and disconnects drivers until the next job's number is k+1 modulo 16,
so the k-th cluster's run gets a job id no other cluster's run has: verl 0.9.1 names the colocated
weight-sync socket /tmp/rl-colocate-zmq-<job id>-replica-0-rank-0.sock, and the jobs of fresh clusters
count from 1 alike (every driver that connects is a job, the start-up probes here too).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class NodeSpec:
    name: str  # the node's name in Ray (list_nodes' node_name): head, actor, reward, ...
    num_cpus: int
    num_gpus: int = 0
    resources: tuple[tuple[str, float], ...] = ()
    object_store_bytes: int = 2 * 2**30


@dataclass(frozen=True)
class Ports:
    gcs: int
    dashboard: int | None  # None: no dashboard (and no state API)
    client_server: int
    agents: tuple[int, ...]  # one dashboard-agent port per node


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together, so none is handed out twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_command(node: NodeSpec, ports: Ports, index: int, python: str = sys.executable) -> list[str]:
    """Pure: the `ray start` command line of the index-th node (index 0 is the head)."""
    cmd = [python, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats"]
    cmd += [f"--node-name={node.name}"]
    cmd += [f"--num-cpus={node.num_cpus}", f"--num-gpus={node.num_gpus}"]
    cmd += [f"--object-store-memory={node.object_store_bytes}"]
    cmd += ["--min-worker-port=0", "--max-worker-port=0", f"--dashboard-agent-listen-port={ports.agents[index]}"]
    if node.resources:
        cmd.append("--resources=" + json.dumps(dict(node.resources), sort_keys=True))
    if index == 0:
        cmd += ["--head", f"--port={ports.gcs}", f"--ray-client-server-port={ports.client_server}"]
        if ports.dashboard is None:
            cmd.append("--include-dashboard=false")
        else:
            cmd += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={ports.dashboard}"]
    else:
        cmd += [f"--address=127.0.0.1:{ports.gcs}", "--include-log-monitor=false"]
    return cmd


def cluster_env() -> dict[str, str]:
    """The environment of the cluster's processes and of the drivers that join it."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return env


NODES_ALIVE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
alive = sorted(n["NodeName"] for n in ray.nodes() if n["Alive"])
try:  # the cluster's session folder (its logs/): Ray's own, no public API gives it
    session = ray._private.worker._global_node.get_session_dir_path()
except Exception:
    session = None
print(json.dumps({"alive": alive, "job": ray.get_runtime_context().get_job_id(), "session_dir": session}))
"""
JOB_MODULUS = 16


def job_number(job_id: str) -> int:
    """Pure: Ray's job id hex (4 bytes, little-endian: '05000000') -> 5."""
    return int.from_bytes(bytes.fromhex(job_id), "little")


def connects_needed(last_job: int, slot: int, modulus: int = JOB_MODULUS) -> int:
    """Pure: drivers to connect after job last_job so that the next job's number is slot+1 modulo modulus."""
    return (slot - last_job) % modulus


CONNECT_ONCE = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(ray.get_runtime_context().get_job_id())
"""


@dataclass
class RayCluster:
    nodes: tuple[NodeSpec, ...]
    dashboard: bool = False
    log_dir: Path | None = None
    ports: Ports | None = None
    last_job: int = 0  # the number of the last job that connected (the probes are jobs too)
    session_dir: Path | None = None  # /tmp/ray/session_*: every node's logs/ (nodes on one machine share it)
    _procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def address(self) -> str:
        assert self.ports is not None, "not started"
        return f"127.0.0.1:{self.ports.gcs}"  # Ray resolves 127.0.0.1 to this node's address

    @property
    def dashboard_url(self) -> str | None:
        if self.ports is None or self.ports.dashboard is None:
            return None
        return f"http://127.0.0.1:{self.ports.dashboard}"

    def start(self, timeout_s: float = 120) -> RayCluster:
        gcs, dash, client, *agents = free_ports(3 + len(self.nodes))
        self.ports = Ports(gcs, dash if self.dashboard else None, client, tuple(agents))
        env = cluster_env()
        for i, node in enumerate(self.nodes):
            out = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = (self.log_dir / f"ray-start-{node.name}.log").open("w")
            self._procs.append(
                subprocess.Popen(
                    start_command(node, self.ports, i),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
            # one node at a time: nodes on one machine share the session folder, and two starting at once
            # can pick the same socket name there (the second raylet then dies with "address in use")
            self._wait_for({n.name for n in self.nodes[: i + 1]}, timeout_s)
        return self

    def _wait_for(self, names: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        seen: list[str] = []
        while True:
            dead = [p.args for p in self._procs if p.poll() is not None]
            if dead:
                self.stop()
                raise RuntimeError(f"ray start exited early: {dead[0]}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            code, stdout = self._probe(max(5.0, min(60.0, remaining)))
            if code == 0:
                probe = json.loads(stdout.strip().splitlines()[-1])
                seen, self.last_job = probe["alive"], job_number(probe["job"])
                if probe.get("session_dir"):
                    self.session_dir = Path(probe["session_dir"])
                if names <= set(seen):
                    return
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"Ray nodes {sorted(names)} not all alive after {timeout_s:.0f} s (alive: {seen})")

    def _probe(self, timeout_s: float) -> tuple[int | None, str]:
        """NODES_ALIVE's exit code and output; (None, "") when it timed out or a node's `ray start` died meanwhile
        (a probe of a GCS that never came up would otherwise wait out its whole timeout)."""
        probe = subprocess.Popen([sys.executable, "-c", NODES_ALIVE, self.address], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, env=cluster_env())
        deadline = time.monotonic() + timeout_s
        while probe.poll() is None:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._procs):
                probe.kill()
                probe.communicate()
                return None, ""
            time.sleep(0.2)
        stdout, _ = probe.communicate()
        return probe.returncode, stdout

    def reserve_job_number(self, slot: int) -> int:
        """Connect drivers until the next job's number is slot+1 modulo JOB_MODULUS; returns that number."""
        if not 0 <= slot < JOB_MODULUS:
            raise ValueError(f"slot must be in 0..{JOB_MODULUS - 1}, got {slot}")
        for _ in range(connects_needed(self.last_job, slot)):
            out = subprocess.run(
                [sys.executable, "-c", CONNECT_ONCE, self.address],
                capture_output=True,
                text=True,
                check=True,
                env=cluster_env(),
                timeout=120,
            )
            self.last_job = job_number(out.stdout.strip().splitlines()[-1])
        return self.last_job + 1

    def stop(self) -> None:
        """End this cluster's processes (each node's process group), workers included."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self._procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(p.poll() is None for p in self._procs):
                time.sleep(0.2)
        self._procs.clear()

    def archive_logs(self, target: Path, **limits: int) -> Path | None:
        """The cluster's Ray logs (every worker's stdout/stderr: the actors', vLLM's) as a tgz; None when the
        session folder is unknown or has no logs. Safe after stop(): Ray leaves the session folder."""
        if self.session_dir is None or not (self.session_dir / "logs").is_dir():
            return None
        return archive_logs(self.session_dir / "logs", target, **limits)

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _log_priority(path: Path) -> tuple[int, str]:
    """Workers' stdout/stderr first (actors, vLLM servers and engines), then the raylets' and GCS's, then the rest."""
    if path.suffix in (".out", ".err"):
        return (0 if path.name.startswith("worker-") else 1, str(path))
    return (2 if path.suffix == ".log" else 3, str(path))


def archive_logs(logs: Path, target: Path, max_file_bytes: int = 1 << 20, max_total_bytes: int = 10 << 20) -> Path:
    """logs/ -> target (tgz): regular files in priority order, each cut to its last max_file_bytes, until
    max_total_bytes of text (the archive is never larger: it has to come back from the device in a bundle)."""
    import io
    import tarfile

    budget = max_total_bytes
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted((p for p in logs.rglob("*") if p.is_file() and not p.is_symlink()), key=_log_priority):
            size = path.stat().st_size
            take = min(size, max_file_bytes, budget)
            if take <= 0:
                if budget <= 0:
                    break
                continue
            with path.open("rb") as f:
                f.seek(size - take)
                data = f.read(take)
            info = tarfile.TarInfo(str(path.relative_to(logs)) + (".tail" if take < size else ""))
            info.size, info.mtime = len(data), int(path.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
            budget -= len(data)
    return target
