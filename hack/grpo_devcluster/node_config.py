"""Pure: the real node's configuration files (containerd, CNI, kubelet, CoreDNS) and its fake size.

Addresses (docs in README "The real node"): the node lives in a network namespace of its own, whose
bridge holds 10.244.0.1 (kubelet, CoreDNS) and the pods of 10.244.0.0/24; the API server's Service IP
10.244.1.1 is an address of that namespace too, forwarded to the API server on the host's loopback.
The host reaches the bridge through a veth (10.244.0.2) and blackholes the rest of 10.244.0.0/16, so
no packet for the pod range ever leaves the machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "grpo-real-node"
POD_SUBNET = "10.244.0.0/24"
NODE_IP = "10.244.0.1"
HOST_IP = "10.244.0.2"
POD_RANGE = "10.244.0.0/16"
SERVICE_CIDR = "10.244.1.0/24"
API_SERVICE_IP = "10.244.1.1"
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
API_SERVICE_PORT = 443
BRIDGE = "grpo-br0"
CNI_BIN_DIR = "/usr/lib/cni"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"

# Only tests that ask for the real node land there; KWOK's fake nodes keep the scale and fault tests.
NODE_LABEL = "grpo.dev/node"
NODE_LABEL_VALUE = "real"
NODE_TAINT = {"key": "grpo.dev/real-node", "value": "true", "effect": "NoSchedule"}

# The node's advertised size. This VM has 2 cores and no GPU; verl asks Ray for 3 CPUs with every GPU,
# so a Ray pod of one GPU needs 3 CPUs of allocatable. The kubelet is shown FAKE_CPUS cores (a fake
# sysfs in its mount namespace only) and the node advertises FAKE_GPUS nvidia.com/gpu as an extended
# resource (Kubernetes' documented way to advertise a resource without a device plugin). Pods get
# their CPU limits enforced by real cgroups but no GPU: the work they do here is CPU work.
FAKE_CPUS = 16
FAKE_GPUS = 8


@dataclass(frozen=True)
class NodePaths:
    """Where one run of the node keeps its files (`workdir`) and what outlives runs (`cache`)."""

    workdir: Path
    cache: Path

    @property
    def containerd_dir(self) -> Path:
        return self.workdir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.containerd_dir / "config.toml"

    @property
    def containerd_root(self) -> Path:
        # Imported images persist across runs: a 10 GB trainer image is unpacked once.
        return self.cache / "containerd-root"

    @property
    def cni_dir(self) -> Path:
        return self.workdir / "cni"

    @property
    def kubelet_dir(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.workdir / "kubelet-config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.workdir / "kubelet.kubeconfig"

    @property
    def coredns_kubeconfig(self) -> Path:
        return self.workdir / "coredns.kubeconfig"

    @property
    def corefile(self) -> Path:
        return self.workdir / "Corefile"

    @property
    def resolv_conf(self) -> Path:
        return self.workdir / "resolv.conf"

    @property
    def fake_sys(self) -> Path:
        return self.workdir / "fake-sys"

    @property
    def api_socket(self) -> Path:
        return self.workdir / "apiserver.sock"

    @property
    def volumes(self) -> Path:
        return self.workdir / "volumes"


def containerd_config(paths: NodePaths) -> str:
    """containerd 1.6 (Debian bookworm): its own root, state, sockets and runc root; CRI with our CNI.

    restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE for raising oom_score_adj; without it every
    sandbox fails ("can't get final child's PID from pipe").
    """
    d = paths.containerd_dir
    return f"""version = 2
root = "{paths.containerd_root}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{paths.containerd_socket}"
[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"
[debug]
  address = "{d / 'debug.sock'}"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  enable_cdi = false
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d / 'runc'}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{paths.cni_dir / 'net.d'}"
"""


def cni_conflist(paths: NodePaths) -> str:
    """A bridge with no gateway, no masquerade and one route: the Service range, via the node.

    isGateway would turn on ip_forward; pods get their /24 and 10.244.1.0/24 and nothing else, so no
    pod can address anything outside the node's namespace.
    """
    config = {
        "cniVersion": "1.0.0",
        "name": "grpo-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_dir / "ipam"),
                    "ranges": [[{"subnet": POD_SUBNET, "rangeStart": "10.244.0.10", "rangeEnd": "10.244.0.250"}]],
                    "routes": [{"dst": SERVICE_CIDR, "gw": NODE_IP}],
                },
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(config, indent=2)


def kubelet_config(paths: NodePaths, ca_cert: Path) -> str:
    """KubeletConfiguration: cgroup v1 with cgroupfs, its server on the node's address (for logs/exec)."""
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
# No QoS cgroup tree: with it the kubelet writes all (fake) CPUs into kubepods' cpuset.cpus, which the
# kernel refuses. Each container still gets its CPU and memory limits from runc.
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://{paths.containerd_socket}
address: {NODE_IP}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
makeIPTablesUtilChains: false
failSwapOn: false
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca_cert}}}
authorization: {{mode: AlwaysAllow}}
clusterDomain: {CLUSTER_DOMAIN}
clusterDNS: ["{NODE_IP}"]
resolvConf: {paths.resolv_conf}
podLogsDir: {paths.kubelet_dir / 'pod-logs'}
volumePluginDir: {paths.kubelet_dir / 'volume-plugins'}
serializeImagePulls: true
maxPods: 30
registerWithTaints:
- {{key: {NODE_TAINT['key']}, value: "{NODE_TAINT['value']}", effect: {NODE_TAINT['effect']}}}
# 100 turns image garbage collection off: the trainer image is ~10 GB and is imported once.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%"}}
"""


def corefile(kubeconfig: Path) -> str:
    """Cluster names from the API server; every other name NXDOMAIN, so no query leaves the machine."""
    return f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
    cache 5
}}
.:53 {{
    bind {NODE_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def resolv_conf() -> str:
    """The kubelet's base resolv.conf: the node's CoreDNS, never the host's resolver."""
    return f"nameserver {NODE_IP}\noptions ndots:5\n"


def cpu_list(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def fake_sysfs_files(cpus: int, real_node0: dict[str, str]) -> dict[str, str]:
    """The files of /sys/devices/system/{cpu,node} (relative paths -> contents) for a node of `cpus` cores.

    `real_node0`: node0's meminfo and hugepages files as the real sysfs has them (memory stays real).
    cadvisor reads cores from node*/cpu* and each cpu's topology; nothing else of the kubelet looks.
    """
    span = cpu_list(cpus)
    files: dict[str, str] = {
        "cpu/online": span, "cpu/possible": span, "cpu/present": span, "cpu/offline": "",
        "cpu/kernel_max": str(max(cpus, 8191)),
        "node/online": "0", "node/possible": "0", "node/has_cpu": "0", "node/has_memory": "0",
        "node/has_normal_memory": "0", "node/node0/cpulist": span, "node/node0/distance": "10",
    }
    for n in range(cpus):
        topology = f"cpu/cpu{n}/topology"
        files |= {
            f"cpu/cpu{n}/online": "1",
            f"{topology}/core_id": str(n),
            f"{topology}/physical_package_id": "0",
            f"{topology}/die_id": "0",
            f"{topology}/cluster_id": str(n),
            f"{topology}/core_cpus_list": str(n),
            f"{topology}/thread_siblings_list": str(n),
            f"{topology}/core_siblings_list": span,
            f"{topology}/package_cpus_list": span,
        }
    files |= {f"node/node0/{name}": text for name, text in real_node0.items()}
    return {path: text if text.endswith("\n") or not text else text + "\n" for path, text in files.items()}


def fake_sysfs_links(cpus: int) -> dict[str, str]:
    """Symlinks (relative path -> target): node0/cpuN -> the cpu directory, as the kernel lays them out."""
    return {f"node/node0/cpu{n}": f"../../cpu/cpu{n}" for n in range(cpus)}
