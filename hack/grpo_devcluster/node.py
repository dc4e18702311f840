"""The real node: containerd + runc + a CNI bridge + a kubelet (+ CoreDNS), beside KWOK's fake nodes.

Everything of the node runs inside one network namespace and one mount namespace that this run
creates (`ip netns add`, then a holder process started with `unshare --mount`); node_config.py says
which addresses live there. From the host:
- the API server (127.0.0.1) is reached by the node over a unix socket: socat listens inside the
  namespace on 127.0.0.1:<apiserver port> (kubelet, CoreDNS) and on the `kubernetes` Service IP
  10.244.1.1:443 (pods), and a host-side socat connects the socket to the API server;
- the host reaches the bridge and the pods through a veth, and blackholes the rest of 10.244.0.0/16.

What the node changes on the host, it records before (state.json) and undoes on stop, also from
another process (`grpo-devcluster stop`) or after a crash of the one that started it: sysctls the
kubelet sets, the fixed host paths kubelet/containerd/CNI write, cgroups, the namespace files, the
veth and the blackhole route. Mounts die with the node's mount namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from . import images, leftovers, node_volumes, processes
from . import node_config as cfg
from . import pki as pki_mod
from .errors import DevClusterError
from .kubeapi import ApiError, KubeApi

# Host paths the kubelet, containerd, runc and the CNI plugins write whatever their configuration says.
FIXED_HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/etc/cni",
                    "/run/containerd", "/opt/cni", "/opt/containerd")
# The kubelet sets these at start (protectKernelDefaults: false); they are global, not per namespace.
KUBELET_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Cgroups the node creates in every v1 controller: containerd's parent for pod containers (the kubelet
# runs without its QoS tree: node_config.kubelet_config) and, should that change, the kubelet's.
CGROUP_PARENTS = ("k8s.io", "kubepods")
NETNS_DIR = Path("/run/netns")
REQUIRED_PROGRAMS = {"containerd": "containerd", "runc": "runc", "ctr": "containerd", "ip": "iproute2",
                     "socat": "socat", "nsenter": "util-linux", "unshare": "util-linux"}


@dataclass
class HostChanges:
    """What the node changed on the host, recorded before it changed it: enough to undo it all."""

    netns: str = ""
    veth: str = ""
    blackhole: bool = False
    sysctls: dict[str, str] = field(default_factory=dict)
    # Never changed (the bridge needs no forwarding): recorded so a test can show it is as it was.
    ip_forward: str = ""
    created_paths: list[str] = field(default_factory=list)
    netns_before: list[str] = field(default_factory=list)
    # Cgroup directories (CGROUP_PARENTS in each controller) the node created; present ones stay.
    cgroups: list[str] = field(default_factory=list)


def _sh(*argv: str, what: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise DevClusterError("real node", f"{what or ' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def cgroup_parents() -> list[Path]:
    """The cgroup directories the kubelet and containerd create (CGROUP_PARENTS in each controller)."""
    return [c / parent for c in CGROUP_ROOT.iterdir() if c.is_dir() and not c.is_symlink() for parent in CGROUP_PARENTS]


def check_host() -> None:
    """Root and the Debian packages the node needs; a clear message naming what is missing."""
    if os.geteuid() != 0:
        raise DevClusterError("real node", "the real node needs root (network and mount namespaces, cgroups)")
    missing = sorted({pkg for prog, pkg in REQUIRED_PROGRAMS.items() if shutil.which(prog) is None})
    if missing:
        raise DevClusterError("real node", f"missing Debian packages: {', '.join(missing)} (hack/bootstrap "
                              "installs them)")
    if not Path(cfg.CNI_BIN_DIR, "bridge").is_file():
        raise DevClusterError("real node", f"no CNI plugins in {cfg.CNI_BIN_DIR}; install containernetworking-plugins")


def write_fake_sysfs(root: Path, cpus: int, real: Path = Path("/sys/devices/system/node/node0")) -> None:
    """The fake /sys/devices/system/{cpu,node} the kubelet sees (node_config.fake_sysfs_files)."""
    shutil.rmtree(root, ignore_errors=True)  # a node started again in the same cluster writes it afresh
    real_node0: dict[str, str] = {}
    if (real / "meminfo").is_file():
        real_node0["meminfo"] = (real / "meminfo").read_text()
    for hp in sorted((real / "hugepages").glob("hugepages-*")) if (real / "hugepages").is_dir() else []:
        for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
            if (hp / name).is_file():
                real_node0[f"hugepages/{hp.name}/{name}"] = (hp / name).read_text()
    for relative, text in cfg.fake_sysfs_files(cpus, real_node0).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for relative, target in cfg.fake_sysfs_links(cpus).items():
        (root / relative).symlink_to(target)


class RealNode:
    """One real node of the local cluster. `launch` starts a tracked process (the cluster's `_launch`)."""

    def __init__(self, workdir: Path, cache: Path, pki: pki_mod.Pki, apiserver_port: int, kubeconfig: Path,
                 launch: Callable[[str, list[str]], processes.Started], binaries: dict[str, Path],
                 kubectl: Callable[..., subprocess.CompletedProcess], log=sys.stderr) -> None:
        self.paths = cfg.NodePaths(workdir, cache)
        self.pki = pki
        self.apiserver_port = apiserver_port
        self.kubeconfig = kubeconfig  # the admin's, for the volume provisioner on the host
        self.launch = launch
        self.binaries = binaries
        self.kubectl = kubectl
        self.log = log
        self.changes = HostChanges()
        self._api: KubeApi | None = None
        self.holder_pid: int | None = None
        # Told each time the record of host changes grows (the cluster saves it in state.json).
        self.on_change: Callable[[dict], None] = lambda _: None

    # -- namespaces ----------------------------------------------------------------------------------
    def in_node(self, *argv: str) -> list[str]:
        """argv run inside the node's network and mount namespaces."""
        assert self.holder_pid is not None, "the node's namespaces are not up"
        return ["nsenter", "-t", str(self.holder_pid), "-m", "-n", "--", *argv]

    def _record_host(self) -> None:
        self.changes.netns, self.changes.veth = leftovers.node_links(f"{os.getpid() % 100000}")
        self.changes.sysctls = {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}
        self.changes.ip_forward = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
        self.changes.created_paths = [p for p in FIXED_HOST_PATHS if not os.path.lexists(p)]
        self.changes.netns_before = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
        self.changes.cgroups = [str(p) for p in cgroup_parents() if not p.exists()]

    def _changed(self) -> None:
        """The record of host changes grew: into the cluster's state.json and the host's registry of nodes."""
        state = changes_to_state(self.changes)
        leftovers.register(state)
        self.on_change(state)

    def _network(self) -> None:
        ns, veth = self.changes.netns, self.changes.veth
        _sh("ip", "netns", "add", ns)
        inside = ("ip", "netns", "exec", ns)
        _sh(*inside, "ip", "link", "set", "lo", "up")
        _sh(*inside, "ip", "link", "add", cfg.BRIDGE, "type", "bridge")
        _sh(*inside, "ip", "addr", "add", f"{cfg.NODE_IP}/24", "dev", cfg.BRIDGE)
        # The `kubernetes` Service's ClusterIP is a local address of the node: pods route the Service range
        # to the node (cni_conflist) and the forwarder below listens on it.
        _sh(*inside, "ip", "addr", "add", f"{cfg.API_SERVICE_IP}/32", "dev", "lo")
        _sh(*inside, "ip", "link", "set", cfg.BRIDGE, "up")
        _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "grpo-n0", "netns", ns)
        _sh(*inside, "ip", "link", "set", "grpo-n0", "master", cfg.BRIDGE)
        _sh(*inside, "ip", "link", "set", "grpo-n0", "up")
        _sh("ip", "addr", "add", f"{cfg.HOST_IP}/24", "dev", veth)
        _sh("ip", "link", "set", veth, "up")
        if "blackhole" not in _sh("ip", "route", "show", cfg.POD_RANGE).stdout:
            _sh("ip", "route", "add", "blackhole", cfg.POD_RANGE)
            self.changes.blackhole = True

    def _holder(self) -> None:
        """The process that owns the node's mount namespace, with the fake sysfs mounted in it."""
        sysfs = self.paths.fake_sys
        write_fake_sysfs(sysfs, cfg.FAKE_CPUS)
        script = (f"mount --bind {sysfs / 'cpu'} /sys/devices/system/cpu && "
                  f"mount --bind {sysfs / 'node'} /sys/devices/system/node && exec sleep infinity")
        # nsenter, not `ip netns exec`: that one remounts /sys, and the kubelet needs the cgroup mounts under it.
        started = self.launch("node-namespaces", ["nsenter", f"--net={NETNS_DIR / self.changes.netns}", "--",
                                                  "unshare", "--mount", "--propagation", "private", "sh", "-c", script])
        self.holder_pid = self._namespace_pid(started)

    def _namespace_pid(self, started: processes.Started) -> int:
        """The pid of `sleep` (exec'd by sh, itself exec'd by nsenter and unshare)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not processes.alive(started.pid):
                raise DevClusterError("real node", "the namespace holder exited:\n" + processes.log_tail(started.log))
            comm = Path(f"/proc/{started.pid}/comm").read_text().strip()
            if comm == "sleep":
                return started.pid
            time.sleep(0.05)
        raise DevClusterError("real node", "the namespace holder did not come up")

    # -- configuration -------------------------------------------------------------------------------
    def _write_configs(self) -> None:
        p = self.paths
        for d in (p.containerd_dir, p.cni_dir / "net.d", p.kubelet_dir, p.containerd_root, p.volumes):
            d.mkdir(parents=True, exist_ok=True)
        p.containerd_config.write_text(cfg.containerd_config(p))
        (p.cni_dir / "net.d" / "10-grpo-pods.conflist").write_text(cfg.cni_conflist(p))
        p.kubelet_config.write_text(cfg.kubelet_config(p, self.pki.ca_cert))
        p.resolv_conf.write_text(cfg.resolv_conf())
        server = f"https://127.0.0.1:{self.apiserver_port}"
        node_cert = pki_mod.client_cert(self.pki, f"system:node:{cfg.NODE_NAME}", "system:nodes", "node")
        dns_cert = pki_mod.client_cert(self.pki, "grpo-devcluster-coredns", None, "coredns")
        p.kubelet_kubeconfig.write_text(yaml.safe_dump(pki_mod.kubeconfig(self.pki, server, node_cert)))
        p.coredns_kubeconfig.write_text(yaml.safe_dump(pki_mod.kubeconfig(self.pki, server, dns_cert)))
        p.corefile.write_text(cfg.corefile(p.coredns_kubeconfig))

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, references: list[str], export: images.NodeImageExport) -> None:
        """Bring the node up and Ready, with the images `references` names in its containerd (see load_images)."""
        check_host()
        # Before recording the host as it is: a node killed without stop would be taken for the host's own state.
        leftovers.remove_leftovers(lambda changes: undo_host_changes(changes_from_state(changes), log=self.log),
                                   cfg.POD_RANGE, cgroup_parents(), log=self.log)
        self._record_host()
        self._changed()
        self._network()
        self._changed()
        self._holder()
        self._write_configs()
        self._forward_apiserver()
        self._start_containerd()
        self.load_images(references, export)
        self._apply_rbac()
        self._start_coredns()
        self._start_kubelet()
        self._advertise()
        self._start_volumes()

    def _forward_apiserver(self) -> None:
        sock = self.paths.api_socket
        self.launch("api-forward-host", ["socat", f"UNIX-LISTEN:{sock},fork,unlink-early,mode=600",
                                         f"TCP:127.0.0.1:{self.apiserver_port}"])
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise DevClusterError("real node", f"the API server forwarder did not create {sock}")
            time.sleep(0.05)
        for name, listen in (("api-forward-node", f"TCP-LISTEN:{self.apiserver_port},bind=127.0.0.1"),
                             ("api-forward-service", f"TCP-LISTEN:{cfg.API_SERVICE_PORT},bind={cfg.API_SERVICE_IP}")):
            self.launch(name, self.in_node("socat", f"{listen},fork,reuseaddr", f"UNIX-CONNECT:{sock}"))

    def _start_containerd(self) -> None:
        started = self.launch("containerd", self.in_node("containerd", "--config", str(self.paths.containerd_config)))
        processes.wait_until("containerd", lambda: self._ctr("version", check=False).returncode == 0, started, 60)

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _sh("ctr", "--address", str(self.paths.containerd_socket), "--namespace", "k8s.io", *args,
                   what=f"ctr {' '.join(args[:3])}", check=check)

    def image_names(self) -> set[str]:
        return set(self._ctr("images", "list", "--quiet").stdout.split())

    def load_images(self, references: list[str], export: images.NodeImageExport) -> list[str]:
        """Import each image the node's containerd lacks. containerd's root outlives runs: it is the cache. When it
        holds an earlier build of the same image (a source change rebuilt its top layers), only the new blobs are
        sent; otherwise the whole image is streamed. Returns the references imported."""
        present = self.image_names()
        imported = []
        for reference in references:
            if reference in present:
                continue
            started = time.monotonic()
            repository = reference.rpartition(":")[0]
            earlier = sorted(name for name in present if name.rpartition(":")[0] == repository)
            how = "whole"
            if earlier:
                try:
                    how = f"{self._import_new_blobs(reference, export) / 1e6:.0f} MB of new blobs"
                except DevClusterError as exc:
                    print(f"[real node] importing only the new blobs of {reference} failed, importing it whole: "
                          f"{exc}", file=self.log, flush=True)
            if how == "whole":
                self._import_whole(reference, export)
            for name in earlier:  # their layers stay as long as the new build uses them
                self._ctr("images", "remove", name, check=False)
            print(f"[real node] imported {reference} in {time.monotonic() - started:.0f}s ({how})", file=self.log,
                  flush=True)
            imported.append(reference)
        return imported

    def _importer(self) -> list[str]:
        return ["ctr", "--address", str(self.paths.containerd_socket), "--namespace", "k8s.io", "images", "import", "-"]

    def _import_whole(self, reference: str, export: images.NodeImageExport) -> None:
        source = subprocess.Popen(export.whole(reference), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sink = subprocess.run(self._importer(), stdin=source.stdout, capture_output=True, text=True, check=False)
        assert source.stdout is not None
        source.stdout.close()
        _, export_err = source.communicate()
        if source.returncode != 0 or sink.returncode != 0:
            raise DevClusterError("real node", f"importing {reference} failed: "
                                  f"{export_err.decode(errors='replace').strip()} {sink.stderr.strip()}")

    def _import_new_blobs(self, reference: str, export: images.NodeImageExport) -> int:
        blobs = images.content_store_blobs(self.paths.containerd_root)
        self.paths.cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="oci-import-", dir=self.paths.cache) as scratch:
            sink = subprocess.Popen(self._importer(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            assert sink.stdin is not None
            try:
                sent = export.new_blobs(reference, blobs, sink.stdin, Path(scratch))
            except BaseException:
                sink.kill()
                sink.communicate()
                raise
            _, err = sink.communicate()  # closes its input: the end of the archive
        if sink.returncode != 0 or reference not in self.image_names():
            raise DevClusterError("real node", f"ctr import of {reference}'s new blobs: {err.decode(errors='replace')}")
        return sent

    def _apply_rbac(self) -> None:
        """CoreDNS reads Services, EndpointSlices and Namespaces as its own user (pki.client_cert)."""
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(coredns_rbac()))

    def _start_coredns(self) -> None:
        started = self.launch("coredns", self.in_node(str(self.binaries["coredns"]), "-conf", str(self.paths.corefile)))
        processes.wait_until("coredns", lambda: "Running" in processes.log_tail(started.log, 50)
                             or "CoreDNS-" in processes.log_tail(started.log, 50), started, 60)

    def _start_kubelet(self) -> None:
        p = self.paths
        labels = f"{cfg.NODE_LABEL}={cfg.NODE_LABEL_VALUE},kubernetes.io/os=linux"
        started = self.launch("kubelet", self.in_node(
            str(self.binaries["kubelet"]), f"--config={p.kubelet_config}", f"--kubeconfig={p.kubelet_kubeconfig}",
            f"--root-dir={p.kubelet_dir}", f"--hostname-override={cfg.NODE_NAME}", f"--node-ip={cfg.NODE_IP}",
            f"--node-labels={labels}", "--v=1"))
        processes.wait_until("kubelet", self._node_ready, started, 180)

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi.from_kubeconfig(self.kubeconfig)
        return self._api

    def _node(self) -> dict:
        return self.api.find("nodes", cfg.NODE_NAME) or {}

    def _node_ready(self) -> bool:
        conditions = (self._node().get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _advertise(self) -> None:
        """nvidia.com/gpu as an extended resource of the node (no device plugin; no GPU behind it)."""
        patch = json.dumps([{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(cfg.FAKE_GPUS)}])
        self.kubectl("patch", "node", cfg.NODE_NAME, "--subresource=status", "--type=json", "-p", patch)
        # The kubelet derives allocatable from capacity at its next status update (every 10 s).
        deadline = time.monotonic() + 60
        while self._node().get("status", {}).get("allocatable", {}).get("nvidia.com/gpu") != str(cfg.FAKE_GPUS):
            if time.monotonic() > deadline:
                raise DevClusterError("real node", "the kubelet never made the advertised GPUs allocatable")
            time.sleep(0.5)

    def _start_volumes(self) -> None:
        """The `grpo-node-local` StorageClass and its provisioner (node_volumes.py), on the host."""
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(node_volumes.storage_class()))
        self.launch("volume-provisioner", [sys.executable, "-m", "grpo_devcluster.node_volumes",
                                           f"--kubeconfig={self.kubeconfig}", f"--root={self.paths.volumes}"])



# --------------------------------------------------------------------------- stopping (any process)


def drain(kubectl: Callable[..., subprocess.CompletedProcess], api: KubeApi, timeout: float = 60) -> None:
    """Delete every pod on the node and wait for the kubelet to tear them down (CNI DEL, unmounts)."""
    on_node = f"spec.nodeName={cfg.NODE_NAME}"
    kubectl("delete", "pods", "--all-namespaces", f"--field-selector={on_node}", "--grace-period=1", "--wait=false",
            check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not api.items("pods", fields=on_node):
                break
        except (OSError, ApiError):
            break
        time.sleep(0.5)
    kubectl("delete", "node", cfg.NODE_NAME, "--wait=false", check=False)


def mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def kill_namespace_members(mount_ns: str, spare: int | None = None) -> None:
    """SIGKILL every process in the node's mount namespace but the holder: containerd's shims outlive it."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != spare and mount_namespace(int(entry.name)) == mount_ns:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), 9)


def coredns_rbac() -> list[dict]:
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "grpo-devcluster-coredns"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "grpo-devcluster-coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "grpo-devcluster-coredns"},
         "subjects": [{"kind": "User", "name": "grpo-devcluster-coredns", "apiGroup": "rbac.authorization.k8s.io"}]},
    ]


def undo_host_changes(changes: HostChanges, log=sys.stderr) -> list[str]:
    """After every node process is gone: remove what the node left on the host. Returns what it could not."""
    problems: list[str] = []
    # Containers whose shims outlived containerd (a crash) are still in the node's cgroups.
    created = [Path(c) for c in changes.cgroups]
    for cgroup in created:
        for procs in sorted(cgroup.glob("**/cgroup.procs")) if cgroup.is_dir() else []:
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
    for cgroup in created:
        problems += leftovers.remove_cgroup_tree(cgroup)
    for name, value in changes.sysctls.items():
        try:
            Path("/proc/sys", name).write_text(value)
        except OSError as exc:
            problems.append(f"sysctl {name}: {exc}")
    if changes.veth:
        _sh("ip", "link", "del", changes.veth, check=False)
    if changes.netns:
        _sh("ip", "netns", "del", changes.netns, check=False)
    if changes.blackhole:
        _sh("ip", "route", "del", "blackhole", cfg.POD_RANGE, check=False)
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():  # pod namespaces whose bind mounts died with the node's mount ns
            if entry.name not in changes.netns_before and entry.name.startswith("cni-"):
                _sh("ip", "netns", "del", entry.name, check=False)
    for path in changes.created_paths:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            problems.append(f"could not remove {path}")
    for problem in problems:
        print(f"[real node] cleanup: {problem}", file=log, flush=True)
    return problems


def changes_from_state(state: dict) -> HostChanges:
    return HostChanges(**state) if state else HostChanges()


def changes_to_state(changes: HostChanges) -> dict:
    return asdict(changes)
