"""The cloud-like profile of the local cluster (`grpo-devcluster start --cloud`): a GKE GPU cluster as a user has it.

What the default profile is kind about, and this one is not:

- nodes carry only what the cloud and NVIDIA's GPU Feature Discovery put on them: a region and a zone
  (`topology.kubernetes.io/*`), an instance type, the GKE node pool, and GFD's `nvidia.com/gpu.product`,
  `nvidia.com/gpu.memory`, `nvidia.com/cuda.driver.major`; no label of ours (`grpo.dev/pool`);
- GPU nodes are tainted `nvidia.com/gpu=present:NoSchedule` as GKE taints them, and the apiserver runs the
  ExtendedResourceToleration admission plugin, which adds the matching toleration only to pods that request GPUs;
- one static H100 node, in zone c only (GPU capacity rarely is everywhere), an A100 pool on a driver older than
  the trainer image needs, and a GPU pool that starts at zero nodes: Karpenter with its KWOK provider
  (karpenter.py) adds H100 machines in zone c when pods ask for them, and removes them when they are empty;
- real Kueue with a ClusterQueue holding one 8-GPU node's worth of quota, for jobs that name a LocalQueue;
- the default StorageClass is zonal block storage bound WaitForFirstConsumer (GKE's `standard-rwo`, EBS gp3): the
  scheduler's volume binding picks the zone of the first pod that mounts a claim, and a disk never leaves its
  zone; ReadWriteMany storage exists only as a class one names (Filestore, EFS), never by default.

Everything here is pure: it returns manifests, cluster.py applies them and zonal_volumes.py provisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kueue import Quota
from .kwok_config import fake_node

REGION = "us-central1"
ZONES = (f"{REGION}-a", f"{REGION}-b", f"{REGION}-c")
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
GPU_RESOURCE = "nvidia.com/gpu"
# GKE's taint on every GPU node; ExtendedResourceToleration tolerates it for pods that request nvidia.com/gpu.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
ADMISSION_PLUGINS = ("NodeRestriction", "ExtendedResourceToleration")

# GPU Feature Discovery's labels (github.com/NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery).
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"  # MiB
GFD_COUNT = "nvidia.com/gpu.count"
GFD_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
GFD_DRIVER_MINOR = "nvidia.com/cuda.driver.minor"

# Kueue's ClusterQueue, for namespaces whose LocalQueue points at it: one 8-GPU node's worth, so a second job of
# that size waits for the first (kueue.py builds the queue, cluster.py starts Kueue).
CLUSTER_QUEUE = "gpu-cluster-queue"
KUEUE_QUOTA = Quota(cpu="512", memory="4Ti", gpu=8)
# Namespaces where Kueue manages Jobs that carry no queue label (they wait until one is given): an admin's opt-in.
KUEUE_MANAGED = {"devcluster.grpo.dev/kueue-managed": "true"}

# Block storage of one zone, bound where its first pod lands (GKE's standard-rwo, AWS's gp3).
ZONAL_CLASS = "standard-rwo"
ZONAL_PROVISIONER = "devcluster.grpo.dev/zonal-disk"
# Shared file storage (Filestore, EFS): every zone reaches it, one names it to get it.
SHARED_CLASS = "shared-rwx"
SHARED_PROVISIONER = "devcluster.grpo.dev/shared-files"


@dataclass(frozen=True)
class Gpu:
    product: str
    memory_mib: int
    driver_major: int
    driver_minor: int = 0


@dataclass(frozen=True)
class NodeGroup:
    """Identical nodes of one cloud node pool in one zone."""

    pool: str
    zone: str
    count: int
    instance_type: str
    cpu: str
    memory: str
    gpus: int = 0
    gpu: Gpu | None = None


H100 = Gpu("NVIDIA-H100-80GB-HBM3", 81559, 580, 95)
# A pool whose image predates the CUDA 13 driver the trainer image needs (docs: driver >= 580).
A100_OLD_DRIVER = Gpu("NVIDIA-A100-SXM4-80GB", 81920, 535, 183)

SYSTEM_POOL = "default-pool"
GPU_POOL = "h100-pool"
OLD_DRIVER_POOL = "a100-pool"

# Static nodes (Karpenter adds the rest): GPUs only in zone c, a CPU node in every zone (the preflight, KubeRay's
# submitter and the converter go there), and the old-driver pool in zone b where a job must not go. Zone c's CPU
# node is the smallest, so the scheduler's least-allocated scoring puts a lone CPU pod in zone a or b: a pod that
# decided a zonal claim's zone before the actor did would put it away from the GPUs every time, not 2 times in 3.
NODE_GROUPS: tuple[NodeGroup, ...] = (
    NodeGroup(SYSTEM_POOL, ZONES[0], 1, "e2-standard-32", "32", "128Gi"),
    NodeGroup(SYSTEM_POOL, ZONES[1], 1, "e2-standard-32", "32", "128Gi"),
    NodeGroup(SYSTEM_POOL, ZONES[2], 1, "e2-standard-16", "16", "64Gi"),
    NodeGroup(GPU_POOL, ZONES[2], 1, "a3-highgpu-8g", "208", "1872Gi", gpus=8, gpu=H100),
    NodeGroup(OLD_DRIVER_POOL, ZONES[1], 1, "a2-ultragpu-8g", "96", "1360Gi", gpus=8, gpu=A100_OLD_DRIVER),
)


def node_name(group: NodeGroup, index: int) -> str:
    return f"{group.pool}-{group.zone.rsplit('-', 1)[-1]}-{index}"


def node_manifest(group: NodeGroup, index: int) -> dict:
    """A KWOK node as the cloud and GFD label it."""
    name = node_name(group, index)
    allocatable = {"cpu": group.cpu, "memory": group.memory, "pods": "110", "ephemeral-storage": "300Gi"}
    labels = {INSTANCE_TYPE_LABEL: group.instance_type, ZONE_LABEL: group.zone, REGION_LABEL: REGION,
              NODE_POOL_LABEL: group.pool}
    taints: tuple[dict, ...] = ()
    if group.gpus and group.gpu is not None:
        allocatable[GPU_RESOURCE] = str(group.gpus)
        labels |= {
            GFD_PRODUCT: group.gpu.product,
            GFD_MEMORY: str(group.gpu.memory_mib),
            GFD_COUNT: str(group.gpus),
            GFD_DRIVER_MAJOR: str(group.gpu.driver_major),
            GFD_DRIVER_MINOR: str(group.gpu.driver_minor),
        }
        taints = (GPU_TAINT,)
    return fake_node(name, labels, allocatable, taints)


def node_manifests(groups: tuple[NodeGroup, ...] = NODE_GROUPS) -> list[dict]:
    return [node_manifest(group, i) for group in groups for i in range(group.count)]


def storage_classes() -> list[dict]:
    """The zonal default class (WaitForFirstConsumer) and the shared class one must name."""
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": ZONAL_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": ZONAL_PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True,
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": SHARED_CLASS},
            "provisioner": SHARED_PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        },
    ]
