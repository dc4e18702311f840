"""The local control plane as one object: start it, use it, stop it.

Used the same way by the `grpo-devcluster` command and by the pytest session fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from . import cloud_profile, images, karpenter, kueue, kwok_config, leftovers, node_config, pki, processes
from . import node as node_mod
from .build import build_all, cache_root, component_dir, go_version
from .components import CLOUD, CONTROL_PLANE, NODE, Component
from .errors import DevClusterError
from .kubeapi import KubeApi

# Loopback ranges, so that no address the cluster hands out is routable: the API server takes a
# loopback service range; KWOK hands pods loopback IPs and nodes a loopback InternalIP.
SERVICE_CIDR = "127.96.0.0/16"
SERVICE_IP = "127.96.0.1"
POD_CIDR = "127.64.0.0/16"
# With a real node, Service IPs must be reachable from its pods: the node's own range, which the host
# blackholes (node_config.py); the `kubernetes` Service's IP is an address of the node's namespace.
HACK_DIR = Path(__file__).resolve().parents[1]  # on PYTHONPATH of our own helper processes
REAL_NODE_SERVICE_CIDR = node_config.SERVICE_CIDR
REAL_NODE_SERVICE_IP = node_config.API_SERVICE_IP
# The node's processes, stopped in this order before the control plane (the kubelet first, the holder
# of its namespaces last: its mount namespace, and every mount in it, ends with it).
NODE_PROCESSES = ("volume-provisioner", "kubelet", "coredns", "containerd", "api-forward-service", "api-forward-node",
                  "api-forward-host", "node-namespaces")


@dataclass
class Ports:
    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 16443
    controller_manager: int = 20257
    scheduler: int = 20259
    kwok: int = 20300
    kuberay_metrics: int = 20380
    kuberay_probe: int = 20381
    dashboard_standin: int = 18265
    # The cloud profile's Kueue (its webhooks are called by the API server; metrics and health for us).
    kueue_webhook: int = 20390
    kueue_metrics: int = 20391
    kueue_health: int = 20392

    @classmethod
    def free(cls) -> Ports:
        return cls(*processes.free_ports(len(cls.__dataclass_fields__)))

    def owners(self) -> dict[int, str]:
        return {port: name for name, port in asdict(self).items()}


@dataclass
class State:
    """What `stop` needs to find the processes again, from another invocation."""

    workdir: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    # The real node's record of what it changed on the host (node.HostChanges), when one runs.
    node: dict = field(default_factory=dict)
    cloud: bool = False


def default_workdir() -> Path:
    return Path(os.environ.get("GRPO_DEVCLUSTER_DIR", Path(tempfile.gettempdir()) / "grpo-devcluster"))


class LocalCluster:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK and KubeRay on 127.0.0.1."""

    def __init__(self, workdir: Path | None = None, ports: Ports | None = None,
                 pools: tuple[kwok_config.NodePool, ...] = kwok_config.DEFAULT_POOLS,
                 ray_job_running_seconds: float = 5.0, log=sys.stderr,
                 apiserver_args: tuple[str, ...] = (), real_node: bool = False, cloud: bool = False) -> None:
        self.workdir = Path(workdir or default_workdir())
        self.ports = ports or Ports()
        self.pools = pools
        self.ray_job_running_seconds = ray_job_running_seconds
        self.log = log
        # Extra kube-apiserver flags, e.g. an audit log for the operator benchmark.
        self.apiserver_args = apiserver_args
        self.real_node = real_node
        # The cloud-like profile (cloud_profile.py): zones, GFD labels, tainted GPU nodes, zonal storage.
        self.cloud = cloud
        self.node: node_mod.RealNode | None = None
        self._node_changes: dict = {}
        self._pids: dict[str, int] = {}
        self._bins: dict[str, Path] = {}
        # What each component was started with, so a fault test can kill it and start it again.
        self._launched: dict[str, tuple[list[str], dict[str, str] | None]] = {}
        self._api: KubeApi | None = None

    # -- paths ---------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def service_cidr(self) -> str:
        return REAL_NODE_SERVICE_CIDR if self.real_node else SERVICE_CIDR

    @property
    def service_ip(self) -> str:
        return REAL_NODE_SERVICE_IP if self.real_node else SERVICE_IP

    @property
    def dashboard_standin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.dashboard_standin}"

    @property
    def api(self) -> KubeApi:
        """A keep-alive API client as the cluster's admin (waits and reads cost a request, not a process)."""
        if self._api is None:
            self._api = KubeApi.from_kubeconfig(self.kubeconfig)
        return self._api

    def bin(self, name: str) -> Path:
        return self._bins[name]

    @property
    def kubectl_path(self) -> Path:
        return self._bins["kubectl"]

    @property
    def helm_path(self) -> Path:
        return self._bins["helm"]

    def env(self) -> dict[str, str]:
        """Environment for clients of this cluster: kubectl, helm, the operator, tests."""
        return {"KUBECONFIG": str(self.kubeconfig),
                "PATH": f"{self.kubectl_path.parent}{os.pathsep}{self.helm_path.parent}{os.pathsep}"
                        + os.environ.get("PATH", "")}

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        if self.state_file.exists():
            raise DevClusterError("devcluster", f"a cluster already runs from {self.workdir} "
                                  "(`grpo-devcluster stop` first, or choose another GRPO_DEVCLUSTER_DIR)")
        self._check_ports()
        self._resolve_binaries()
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        started = time.monotonic()
        try:
            creds = pki.generate(self.workdir / "pki", self.service_ip)
            self.kubeconfig.write_text(yaml.safe_dump(pki.kubeconfig(creds, self.server)))
            self._save_state()
            self._start_etcd()
            self._start_apiserver(creds)
            self._start_controller_manager(creds)
            self._start_scheduler()
            self._start_kwok()
            self._seed_cluster()
            if self.cloud:
                self._start_zonal_volumes()
                self._start_karpenter()
                self._start_kueue()
            self._start_dashboard_standin()
            self._start_kuberay()
            if self.real_node:
                self.start_node()
        except BaseException:
            self.stop()
            raise
        print(f"[devcluster] control plane up in {time.monotonic() - started:.1f}s; "
              f"export KUBECONFIG={self.kubeconfig}", file=self.log, flush=True)
        return self

    @contextmanager
    def running_until_exit(self) -> Iterator[LocalCluster]:
        """Started on entry, stopped on exit (a fixture's whole life)."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop every component (the real node first, then the rest in reverse order), undo what the node
        changed on the host, and remove the state; safe to call twice."""
        pids, changes = dict(self._pids), dict(self._node_changes)
        if not pids and self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            pids, changes = state.get("pids", {}), state.get("node", {})
        if changes:
            self._stop_node(pids, changes)
        for name in reversed(list(pids)):
            if name not in NODE_PROCESSES:
                processes.stop_group(pids[name])
        self._pids.clear()
        self.state_file.unlink(missing_ok=True)

    def _stop_node(self, pids: dict[str, int], changes: dict) -> None:
        recorded = node_mod.changes_from_state(changes)
        if "kube-apiserver" in pids and processes.alive(pids["kube-apiserver"]) and "kubectl" in self._bins:
            node_mod.drain(self.kubectl, self.api)
        holder = pids.get("node-namespaces")
        mount_ns = node_mod.mount_namespace(holder) if holder else None
        for name in NODE_PROCESSES:
            if name in pids and name != "node-namespaces":
                processes.stop_group(pids[name])
        if mount_ns is not None:
            node_mod.kill_namespace_members(mount_ns, spare=holder)
        if holder:
            processes.stop_group(holder)
        node_mod.undo_host_changes(recorded, log=self.log)
        leftovers.unregister(recorded.netns)
        self._node_changes = {}
        for name in NODE_PROCESSES:
            self._pids.pop(name, None)
        self.node = None


    @classmethod
    def attach(cls, workdir: Path | None = None) -> LocalCluster:
        """The cluster started earlier from `workdir` (by another process), to use or stop it."""
        workdir = Path(workdir or default_workdir())
        state_file = workdir / "state.json"
        if not state_file.exists():
            raise DevClusterError("devcluster", f"no cluster runs from {workdir}")
        state = State(**json.loads(state_file.read_text()))
        cluster = cls(workdir, Ports(**state.ports), real_node=bool(state.node), cloud=state.cloud)
        cluster._pids = dict(state.pids)
        cluster._node_changes = dict(state.node)
        cluster._resolve_binaries()
        return cluster

    def running_pids(self) -> dict[str, int]:
        return dict(self._pids)

    def kill_component(self, name: str) -> None:
        """SIGKILL one component's process group, as a crashed node would lose it."""
        processes.kill_group(self._pids[name])

    def restart_component(self, name: str, kill: bool = True, timeout: float = 120) -> None:
        """Stop `name` (SIGKILL by default) and start it again with the same argv; wait until it serves."""
        if kill:
            self.kill_component(name)
        else:
            processes.stop_group(self._pids[name])
        argv, env = self._launched[name]
        started = self._launch(name, argv, env)
        checks = {
            "etcd": lambda: processes.http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health"),
            "kube-apiserver": lambda: processes.http_ok(
                f"{self.server}/readyz", ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))),
        }
        processes.wait_until(name, checks.get(name, lambda: True), started, timeout)

    def running(self) -> dict[str, bool]:
        return {name: processes.alive(pid) for name, pid in self._pids.items()}

    # -- helpers for users of the cluster -------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
                                input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise DevClusterError("kubectl", f"`kubectl {' '.join(args)}` failed: {result.stderr.strip()}")
        return result

    def apply(self, manifests: list[dict] | dict, server_side: bool = False) -> None:
        docs = manifests if isinstance(manifests, list) else [manifests]
        args = ["apply", "-f", "-", *(["--server-side", "--force-conflicts"] if server_side else [])]
        self.kubectl(*args, input=yaml.safe_dump_all(docs))

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Watch each CRD until it is Established (`kubectl wait` fails outright while it has no conditions)."""
        def established(crd: dict | None) -> bool:
            conditions = ((crd or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        for crd in crds:
            try:
                self.api.wait("customresourcedefinitions", crd, None, established, timeout, f"CRD {crd} Established")
            except AssertionError as exc:
                raise DevClusterError("kube-apiserver", str(exc)) from None

    # -- components ----------------------------------------------------------------------------------
    def _check_ports(self) -> None:
        for port, owner in self.ports.owners().items():
            if not processes.port_is_free(port):
                raise DevClusterError(owner.replace("_", "-"), f"port {port} on 127.0.0.1 is already in use; "
                                      "stop what holds it (`ss -ltnp`) or start with other ports")

    @property
    def components(self) -> tuple[Component, ...]:
        """What this profile runs: the cloud profile adds Karpenter and Kueue (minutes of Go build, needed by no
        other)."""
        return (*CONTROL_PLANE, *NODE, *(CLOUD if self.cloud else ()))

    def _resolve_binaries(self) -> None:
        go = go_version()
        missing = tuple(c for c in self.components if not (component_dir(c, go) / ".complete").is_file())
        if missing:
            print(f"[devcluster] building {', '.join(c.name for c in missing)} (first run; cached afterwards)",
                  file=self.log, flush=True)
            build_all(missing, log=self.log)
        for component in self.components:
            directory = component_dir(component, go)
            for name in component.commands:
                self._bins[name] = directory / "bin" / name
            if component.manifests:
                self._bins[f"{component.name}-manifests"] = directory / "manifests"

    def _launch(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> processes.Started:
        started = processes.start(name, argv, self.log_dir, env)
        self._pids[name] = started.pid
        self._launched[name] = (argv, env)
        self._save_state()
        return started

    def _save_state(self) -> None:
        state = State(str(self.workdir), asdict(self.ports), dict(self._pids), dict(self._node_changes), self.cloud)
        self.state_file.write_text(json.dumps(asdict(state)))

    def _tls(self, creds: pki.Pki) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(creds.ca_cert))

    def _start_etcd(self) -> None:
        p = self.ports
        peer = f"http://127.0.0.1:{p.etcd_peer}"
        started = self._launch("etcd", [
            str(self.bin("etcd")), "--name=devcluster", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=devcluster={peer}",
            # Test data: durability buys nothing and fsync dominates start-up on slow disks.
            "--unsafe-no-fsync", "--log-level=warn",
        ])
        processes.wait_until("etcd", lambda: processes.http_ok(f"http://127.0.0.1:{p.etcd_client}/health"),
                             started, 60)

    def _start_apiserver(self, creds: pki.Pki) -> None:
        p = self.ports
        started = self._launch("kube-apiserver", [
            str(self.bin("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{p.etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={p.apiserver}",
            f"--tls-cert-file={creds.serving_cert}", f"--tls-private-key-file={creds.serving_key}",
            f"--client-ca-file={creds.ca_cert}",
            # Node: the real node's kubelet acts as system:node:<name>, restricted to its own node and pods.
            "--authorization-mode=Node,RBAC", f"--enable-admission-plugins={','.join(self.admission_plugins)}",
            f"--kubelet-client-certificate={creds.admin_cert}", f"--kubelet-client-key={creds.admin_key}",
            # The node's address, never its name: a name would be looked up in the host's DNS.
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={creds.sa_pub}",
            f"--service-account-signing-key-file={creds.sa_key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            # No Endpoints for the `kubernetes` Service: nothing in-cluster could reach them anyway.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true", "--profiling=false",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            *self.apiserver_args,
        ])
        context = self._tls(creds)
        processes.wait_until("kube-apiserver",
                             lambda: processes.http_ok(f"{self.server}/readyz", context), started, 120)

    def _start_controller_manager(self, creds: pki.Pki) -> None:
        p = self.ports
        started = self._launch("kube-controller-manager", [
            str(self.bin("kube-controller-manager")),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={p.controller_manager}",
            f"--service-account-private-key-file={creds.sa_key}", f"--root-ca-file={creds.ca_cert}",
            f"--cluster-signing-cert-file={creds.ca_cert}", f"--cluster-signing-key-file={creds.ca_key}",
            f"--service-cluster-ip-range={self.service_cidr}", "--allocate-node-cidrs=false",
            "--use-service-account-credentials=true", "--leader-elect=false",
            f"--cert-dir={self.workdir / 'kcm-certs'}",
        ])
        context = self._tls_insecure()
        processes.wait_until("kube-controller-manager", lambda: processes.http_ok(
            f"https://127.0.0.1:{p.controller_manager}/healthz", context), started, 60)

    def _start_scheduler(self) -> None:
        p = self.ports
        started = self._launch("kube-scheduler", [
            str(self.bin("kube-scheduler")),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={p.scheduler}", "--leader-elect=false",
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
        ])
        context = self._tls_insecure()
        processes.wait_until("kube-scheduler", lambda: processes.http_ok(
            f"https://127.0.0.1:{p.scheduler}/healthz", context), started, 60)

    @staticmethod
    def _tls_insecure() -> ssl.SSLContext:
        # The controller-manager and scheduler serve health on self-signed certificates they make
        # themselves at start; only liveness is read from them, on loopback.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def _start_kwok(self) -> None:
        p = self.ports
        config = self.workdir / "kwok.yaml"
        config.write_text(kwok_config.kwok_config_yaml())
        started = self._launch("kwok", [
            str(self.bin("kwok")), f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            f"--manage-nodes-with-annotation-selector={kwok_config.FAKE_NODE_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}", "--node-ip=127.0.0.1", f"--server-address=127.0.0.1:{p.kwok}",
        ])
        processes.wait_until("kwok", lambda: processes.http_ok(f"http://127.0.0.1:{p.kwok}/healthz"),
                             started, 60)

    @property
    def admission_plugins(self) -> tuple[str, ...]:
        return cloud_profile.ADMISSION_PLUGINS if self.cloud else ("NodeRestriction",)

    def _seed_cluster(self) -> None:
        """Fake GPU nodes, the default StorageClass and KubeRay's CRDs; wait until all are usable."""
        if self.cloud:
            self.apply([*cloud_profile.node_manifests(), *cloud_profile.storage_classes()])
        else:
            self.apply([*kwok_config.node_manifests(self.pools), kwok_config.storage_class()])
        # Too large for client-side apply's last-applied annotation.
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.bin("kuberay-manifests")))
        self.wait_established("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")
        self.kubectl("wait", "--for=condition=Ready", "--timeout=60s", "nodes", "--all", timeout=90)
        # The `default` namespace's ServiceAccount comes from kube-controller-manager; pods need it.
        try:
            self.api.wait("serviceaccounts", "default", "default", lambda sa: sa is not None, 60,
                          "the default ServiceAccount")
        except AssertionError:
            raise DevClusterError("kube-controller-manager", "never created the default ServiceAccount") from None

    def _start_zonal_volumes(self) -> None:
        self._launch("zonal-volumes", [sys.executable, "-m", "grpo_devcluster.zonal_volumes",
                                       f"--kubeconfig={self.kubeconfig}"], env={"PYTHONPATH": str(HACK_DIR)})

    def _start_karpenter(self) -> None:
        """Karpenter with its KWOK provider, and the profile's GPU NodePool that starts at zero nodes.

        Its metrics and health servers bind every interface (":<port>", no flag narrows them), so it runs in a
        network namespace of its own that holds only loopback: the API server is forwarded in through a unix
        socket to the same address, and nothing it serves is reachable from outside. It is up once it has
        judged the NodePool Ready."""
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.bin("karpenter-manifests")))
        self.wait_established(*karpenter.CRD_NAMES)
        types = self.workdir / "karpenter-instance-types.json"
        types.write_text(karpenter.instance_types_json())
        sock = self.workdir / "karpenter-api.sock"
        forward = self._launch("karpenter-api-forward", ["socat", f"UNIX-LISTEN:{sock},fork,unlink-early,mode=600",
                                                         f"TCP:127.0.0.1:{self.ports.apiserver}"])
        processes.wait_until("karpenter-api-forward", sock.exists, forward, 10)
        launch = karpenter.controller_launch(self.bin("karpenter"), self.kubeconfig, types,
                                             karpenter.ControllerPorts(metrics=8080, health_probe=8081))
        inside = (f"ip link set lo up && socat TCP-LISTEN:{self.ports.apiserver},bind=127.0.0.1,fork,reuseaddr "
                  f"UNIX-CONNECT:{sock} & exec \"$@\"")
        started = self._launch("karpenter", ["unshare", "--user", "--map-root-user", "--net", "--",
                                             "sh", "-c", inside, "karpenter", *launch.argv], launch.env)
        self.apply([karpenter.node_class(), karpenter.node_pool(karpenter.PROFILE_POOL)])

        def pool_ready() -> bool:
            pool = self.api.find("nodepools", karpenter.PROFILE_POOL.name)
            conditions = ((pool or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        processes.wait_until("karpenter", pool_ready, started, 60)

    def _start_kueue(self) -> None:
        """Kueue with a ClusterQueue holding the profile's GPU quota (cloud_profile.KUEUE_QUOTA); a namespace
        points a LocalQueue at it (cloud_profile.CLUSTER_QUEUE).

        Its webhooks are called by the API server at 127.0.0.1 with a CA of its own. It manages Jobs without the
        queue label too (manageJobsWithoutQueueName) in the namespaces labelled cloud_profile.KUEUE_MANAGED, as an
        admin who wants no GPU job to bypass the queues sets it: there an unlabelled Job waits forever. Its metrics
        certificate has a fixed path under /etc, laid over /etc in a mount namespace of its own
        (kueue.manager_launch)."""
        p, root = self.ports, self.workdir / "kueue"
        certs = kueue.webhook_certs()
        cert_dir, metrics_dir = root / "certs", root / "etc" / kueue.METRICS_CERT_DIR
        for directory in (cert_dir, metrics_dir):
            directory.mkdir(parents=True)
            (directory / "tls.crt").write_bytes(certs.cert_pem)
            (directory / "tls.key").write_bytes(certs.key_pem)
        manifests = [doc for path in sorted(self.bin("kueue-manifests").glob("*.yaml"))
                     for doc in yaml.safe_load_all(path.read_text()) if doc]
        crds = kueue.crds([m for m in manifests if m.get("kind") == "CustomResourceDefinition"], p.kueue_webhook,
                          certs.ca_pem)
        self.apply(crds, server_side=True)
        self.wait_established(*(crd["metadata"]["name"] for crd in crds))
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(kueue.manager_config(
            kueue.ManagerPorts(p.kueue_webhook, p.kueue_metrics, p.kueue_health), cert_dir,
            manage_jobs_without_queue_name=True, managed_namespaces=cloud_profile.KUEUE_MANAGED)))
        launch = kueue.manager_launch(self.bin("kueue"), config, self.kubeconfig, etc_overlay=root / "etc")
        started = self._launch("kueue", launch.argv, launch.env)
        processes.wait_until("kueue", lambda: processes.http_ok(f"http://127.0.0.1:{p.kueue_health}/readyz"),
                             started, 60)
        self.apply(kueue.webhook_configurations(manifests, p.kueue_webhook, certs.ca_pem))
        self.apply([kueue.resource_flavor(), kueue.cluster_queue(cloud_profile.CLUSTER_QUEUE,
                                                                 cloud_profile.KUEUE_QUOTA)])

    def _start_dashboard_standin(self) -> None:
        p = self.ports
        real = [f"--cluster-dns={node_config.NODE_IP}", f"--real-pods={node_config.POD_SUBNET}"]
        started = self._launch("ray-dashboard-standin", [
            sys.executable, "-m", "grpo_devcluster.dashboard_standin", f"--port={p.dashboard_standin}",
            f"--running-seconds={self.ray_job_running_seconds}", *(real if self.real_node else []),
        ], env={"PYTHONPATH": str(HACK_DIR)})
        processes.wait_until("ray-dashboard-standin", lambda: processes.http_ok(
            f"{self.dashboard_standin_url}/-/healthz"), started, 30)

    def _start_kuberay(self) -> None:
        p = self.ports
        started = self._launch("kuberay-operator", [
            str(self.bin("ray-operator")), f"--metrics-addr=127.0.0.1:{p.kuberay_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{p.kuberay_probe}", "--enable-leader-election=false",
            "--log-stdout-encoder=console",
        ], env={
            "KUBECONFIG": str(self.kubeconfig),
            # Every Ray dashboard request (…svc.cluster.local:8265) goes to the loopback stand-in;
            # Go never proxies loopback, so API-server traffic stays direct.
            "HTTP_PROXY": self.dashboard_standin_url, "http_proxy": self.dashboard_standin_url,
            "HTTPS_PROXY": self.dashboard_standin_url, "https_proxy": self.dashboard_standin_url,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        })
        processes.wait_until("kuberay-operator", lambda: processes.http_ok(
            f"http://127.0.0.1:{p.kuberay_probe}/readyz"), started, 60)

    # -- the real node -------------------------------------------------------------------------------
    def start_node(self) -> None:
        """Start the real node (LocalCluster(real_node=True) does at start); Ready when it returns."""
        if not self.real_node:
            raise DevClusterError("real node", "this cluster was started without real_node=True: its Service "
                                  "range is not reachable from a real node's pods")
        if self.node is not None:
            raise DevClusterError("real node", "the real node already runs")
        started = time.monotonic()
        self.node = self._make_node()
        # Recorded before anything changes, so a failed start is undone by stop() like a finished one.
        self.node.on_change = self._record_node
        buildah = images.Buildah(log=self.log)
        with images.build_lock():
            pause = images.build_pause(buildah)
        self.node.start([pause], images.NodeImageExport(buildah))
        print(f"[devcluster] real node {node_config.NODE_NAME} Ready in {time.monotonic() - started:.1f}s",
              file=self.log, flush=True)

    def _make_node(self) -> node_mod.RealNode:
        return node_mod.RealNode(
            self.workdir / "node", cache_root() / "node", pki.Pki(self.workdir / "pki"), self.ports.apiserver,
            self.kubeconfig,
            launch=lambda name, argv: self._launch(name, argv, {"PYTHONPATH": str(HACK_DIR)}),
            binaries={"kubelet": self.bin("kubelet"), "coredns": self.bin("coredns")},
            kubectl=self.kubectl, log=self.log)

    def attach_node(self) -> None:
        """The real node a cluster started by another process runs (after attach()), to load images into."""
        if not self._node_changes:
            raise DevClusterError("real node", f"the cluster of {self.workdir} runs no real node")
        self.node = self._make_node()
        self.node.holder_pid = self._pids.get("node-namespaces")
        self.node.changes = node_mod.changes_from_state(self._node_changes)

    def stop_node(self) -> None:
        """Stop the real node and undo what it changed on the host; the control plane keeps running."""
        if self._node_changes:
            self._stop_node(dict(self._pids), dict(self._node_changes))
        self._save_state()

    def load_node_images(self, which: tuple[str, ...] = ("operator", "trainer")) -> dict[str, str]:
        """Build (cached) our images and put them into the real node; returns name -> reference."""
        if self.node is None:
            raise DevClusterError("real node", "this cluster has no real node (LocalCluster(real_node=True))")
        built = images.build_node_images(which, log=self.log)
        buildah = images.Buildah(log=self.log)
        self.node.load_images([b.reference for b in built.values()], images.NodeImageExport(buildah))
        return {name: b.reference for name, b in built.items()}

    def _record_node(self, changes: dict) -> None:
        self._node_changes = changes
        self._save_state()
