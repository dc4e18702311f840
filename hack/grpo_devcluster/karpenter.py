"""Karpenter's KWOK provider for the cloud-like profile: a GPU node pool that starts at zero nodes.

Karpenter (sigs.k8s.io/karpenter, pinned in hack/cluster/modules/karpenter) plays the cloud's node autoscaler: for
pods that fit no node it creates a NodeClaim, and its KWOK provider turns the NodeClaim into a Node annotated
`kwok.x-k8s.io/node=fake`, which our KWOK then makes Ready. When the node is empty, consolidation deletes it.

The provider knows only the instance types of a JSON file we hand it (INSTANCE_TYPES_FILE_PATH): each carries a
ResourceList, so `nvidia.com/gpu` is capacity like cpu, and offerings whose single-valued requirements become node
labels. The provider has no hook for labels of the machine itself, so GPU Feature Discovery's per-GPU labels ride on
the offerings, and the per-pool ones (the driver) on the NodePool's template.

Everything here is pure: it returns manifests, JSON and argv; the caller writes, applies and starts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .cloud_profile import (
    GFD_COUNT,
    GFD_DRIVER_MAJOR,
    GFD_DRIVER_MINOR,
    GFD_MEMORY,
    GFD_PRODUCT,
    GPU_RESOURCE,
    GPU_TAINT,
    H100,
    INSTANCE_TYPE_LABEL,
    NODE_POOL_LABEL,
    REGION,
    REGION_LABEL,
    ZONE_LABEL,
    ZONES,
    Gpu,
)

# sigs.k8s.io/karpenter v1.15.0's go.mod says `go 1.26.9`; the machine's go1.26.8 refuses it (GOTOOLCHAIN=local),
# and go1.27.3 is the newer Go the module proxy serves here. Only this module's build needs it: exported for every
# build it would change `go env GOVERSION`, so every other component's cache key, and rebuild them all.
GO_TOOLCHAIN = "go1.27.3"
PACKAGE = "sigs.k8s.io/karpenter/kwok"

# Inside the module: the kwok chart's copies of the core CRDs carry the extra validation that keeps the
# karpenter.kwok.sh label domain restricted (pkg/apis/crds has the plain ones). NodeOverlay and CapacityBuffer are
# read only behind their feature gates (off by default); they are installed anyway, as the chart does, so turning a
# gate on needs no other change. Only that set was tried.
CRD_FILES: tuple[str, ...] = (
    "kwok/charts/crds/karpenter.sh_nodepools.yaml",
    "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
    "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml",
    "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
    "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
)
CRD_NAMES: tuple[str, ...] = (
    "nodepools.karpenter.sh",
    "nodeclaims.karpenter.sh",
    "nodeoverlays.karpenter.sh",
    "capacitybuffers.autoscaling.x-k8s.io",
    "kwoknodeclasses.karpenter.kwok.sh",
)

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
# A Gpu's driver is ignored here: the driver is the pool's (AutoscaledPool), as a node image's.
A100 = Gpu("NVIDIA-A100-SXM4-80GB", 81920, H100.driver_major, H100.driver_minor)


@dataclass(frozen=True)
class InstanceType:
    """A machine type as the cloud sells it: 8 GPUs of one product, on demand, in some zones."""

    name: str
    cpu: str
    memory: str
    gpu: Gpu
    # On-demand USD per hour, roughly the list price: Karpenter only compares them, launching the cheapest
    # type that fits the pending pods.
    price: float
    gpus: int = 8
    zones: tuple[str, ...] = ZONES
    ephemeral_storage: str = "300Gi"


A3_HIGHGPU_8G = InstanceType("a3-highgpu-8g", "208", "1872Gi", H100, 88.25)
A2_ULTRAGPU_8G = InstanceType("a2-ultragpu-8g", "96", "1360Gi", A100, 40.22)
# AWS's 8x H100: for a pool that wants an EKS-shaped name; zones stay the profile's, which no AWS region has.
P5_48XLARGE = InstanceType("p5.48xlarge", "192", "2Ti", H100, 55.04)
INSTANCE_TYPES: tuple[InstanceType, ...] = (A3_HIGHGPU_8G, A2_ULTRAGPU_8G, P5_48XLARGE)


def _in(key: str, value: str) -> dict:
    return {"key": key, "operator": "In", "values": [value]}


def _gpu_labels(it: InstanceType) -> dict[str, str]:
    """GFD's labels that follow from the hardware, so they belong to the instance type and not to a pool."""
    return {GFD_PRODUCT: it.gpu.product, GFD_MEMORY: str(it.gpu.memory_mib), GFD_COUNT: str(it.gpus)}


def instance_type_options(it: InstanceType) -> dict:
    """One entry of the provider's instance-type file (kwok/cloudprovider/helpers.go InstanceTypeOptions).

    Every single-valued requirement of the chosen offering becomes a node label, and its key becomes one Karpenter
    schedules on: a pod's nodeSelector on nvidia.com/gpu.product then picks the type that has that GPU.
    """
    offerings = [
        {
            "Price": it.price,
            "Available": True,
            "Requirements": [
                _in(CAPACITY_TYPE_LABEL, "on-demand"),
                _in(ZONE_LABEL, zone),
                _in(REGION_LABEL, REGION),
                *(_in(key, value) for key, value in _gpu_labels(it).items()),
            ],
        }
        for zone in it.zones
    ]
    return {
        "name": it.name,
        "offerings": offerings,
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {
            "cpu": it.cpu,
            "memory": it.memory,
            "pods": "110",
            "ephemeral-storage": it.ephemeral_storage,
            GPU_RESOURCE: str(it.gpus),
        },
    }


def instance_types_json(types: tuple[InstanceType, ...] = INSTANCE_TYPES) -> str:
    """The file INSTANCE_TYPES_FILE_PATH names; it replaces the provider's built-in CPU-only catalogue."""
    return json.dumps([instance_type_options(it) for it in types], indent=2)


@dataclass(frozen=True)
class AutoscaledPool:
    """A Karpenter NodePool of GPU machines that holds no node until a pod needs one."""

    name: str
    instance_types: tuple[str, ...] = (A3_HIGHGPU_8G.name,)
    zones: tuple[str, ...] = ZONES
    max_gpus: int = 32
    # The driver comes with the node image, not the machine: one pool, one driver.
    driver_major: int = H100.driver_major
    driver_minor: int = H100.driver_minor
    # How long an empty or underused node lives before consolidation removes it. Scale-down of a real pool
    # is minutes; here it is short so a test sees it, and long enough that the pods of a job being
    # recreated (KubeRay retrying a RayJob) find their node still there.
    consolidate_after: str = "30s"
    # Share of the pool's nodes consolidation may remove at once. Karpenter's default, 10%, rounds up to one
    # node: an idle pool of n nodes then drains one node per ~25 s disruption round.
    disruption_budget: str = "100%"
    node_class: str = "default"
    extra_labels: dict[str, str] = field(default_factory=dict)


# The cloud profile's pool: H100 machines, none until a pod asks, two at most, in zone c like every GPU of the
# profile (cloud_profile.py): a claim bound in another zone then strands its pods, as on a cloud short of GPUs there.
PROFILE_POOL = AutoscaledPool("h100-autoscaled", zones=(ZONES[2],), max_gpus=16)


def node_pool(pool: AutoscaledPool) -> dict:
    """A NodePool as GKE's GPU node pools behave: tainted, on demand, labelled by pool and driver."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {
                    "labels": {
                        NODE_POOL_LABEL: pool.name,
                        GFD_DRIVER_MAJOR: str(pool.driver_major),
                        GFD_DRIVER_MINOR: str(pool.driver_minor),
                        **pool.extra_labels,
                    },
                    # Copied onto the Node, as the static KWOK nodes have it: no kubelet caches config maps.
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": pool.node_class},
                    "requirements": [
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(pool.instance_types)},
                        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
                        {"key": ZONE_LABEL, "operator": "In", "values": list(pool.zones)},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    ],
                    "taints": [dict(GPU_TAINT)],
                    # A GKE node lives until it is scaled down; the default 720h would end a long run's node.
                    "expireAfter": "Never",
                },
            },
            # The GPU count is the budget that matters; cpu and memory follow from the machine type.
            "limits": {GPU_RESOURCE: str(pool.max_gpus)},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": pool.consolidate_after,
                "budgets": [{"nodes": pool.disruption_budget}],
            },
        },
    }


def node_class(name: str = "default", registration_delay: str = "5s") -> dict:
    """The provider's node class. The delay stands in for a GPU VM's boot (minutes on a cloud): long enough that
    a pod is seen Pending with a NodeClaim for it, short enough for tests."""
    return {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": name},
        "spec": {"nodeRegistrationDelay": registration_delay},
    }


@dataclass(frozen=True)
class ControllerPorts:
    metrics: int
    health_probe: int


@dataclass(frozen=True)
class ControllerLaunch:
    argv: list[str]
    env: dict[str, str]


def controller_launch(binary: Path, kubeconfig: Path, instance_types_file: Path, ports: ControllerPorts,
                      log_level: str = "info") -> ControllerLaunch:
    """argv and the extra environment for the controller.

    Karpenter parses os.Args with its own FlagSet, which has no --kubeconfig: the kubeconfig goes through
    KUBECONFIG, which controller-runtime reads. The metrics and health servers bind ":<port>", every interface,
    and no flag narrows that; the ports are only chosen free. There is no webhook and no cluster name in v1.
    """
    return ControllerLaunch(
        argv=[
            str(binary),
            f"--instance-types-file-path={instance_types_file}",
            f"--metrics-port={ports.metrics}",
            f"--health-probe-port={ports.health_probe}",
            # One replica: a Lease would only delay the start by its acquisition.
            "--disable-leader-election=true",
            f"--log-level={log_level}",
            # Sizes the provisioner's worker pool (ceil(millicores / 1000)); one is plenty for a handful of nodes.
            "--cpu-requests=1000",
        ],
        env={"KUBECONFIG": str(kubeconfig)},
    )


def crd_paths(module_dir: Path) -> list[Path]:
    """The CRD files, given the Go module's directory (`go list -m -f {{.Dir}} sigs.k8s.io/karpenter`)."""
    return [module_dir / name for name in CRD_FILES]
