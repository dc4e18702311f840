"""spec.network as what it adds to the pods of every role that talks NCCL (docs/multi-node.md). Pure.

The GPU roles (actor, rollout, reward) run FSDP's collectives and the actor-to-vLLM weight sync over NCCL; the
head, the preflight and the converter do not. What each mode needs from the cluster (device plugin, Multus, the
image's libraries) is the docs' table; here only what the pods ask for and the environment NCCL and libfabric read.
"""

from __future__ import annotations

from grpo_operator.api import EnvVar, NetworkSpec, PodOverride

NCCL_ROLES = ("actor", "rollout", "reward")
# RDMA registers (pins) the buffers it sends from, within the process's memlock limit. No capability is added for
# it: the trainer runs as uid 1000 without privilege escalation, and a non-root process gets no ambient
# capabilities from the container runtime, so IPC_LOCK would do nothing but force a privileged namespace. The
# limit comes from the node's container runtime (docs/multi-node.md: LimitMEMLOCK=infinity).
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"


def _env(**values: str) -> list[EnvVar]:
    return [EnvVar(name=name, value=value) for name, value in values.items()]


def network_override(network: NetworkSpec | None) -> PodOverride | None:
    """What every NCCL role's pod gets for `network` (None: nothing, the pod network as it is)."""
    if network is None:
        return None
    env: list[EnvVar] = []
    if network.socket_interface:
        env += _env(NCCL_SOCKET_IFNAME=network.socket_interface, GLOO_SOCKET_IFNAME=network.socket_interface)
    if network.mode == "tcp":
        # No IB transport: NCCL would otherwise probe for HCAs the pods were not given.
        return PodOverride(env=[*env, *_env(NCCL_IB_DISABLE="1")])
    if network.mode == "rdma":
        rdma = network.rdma  # may be left out: the device plugin's usual name, one device
        resource = rdma.resource_name if rdma else "rdma/ib"
        devices = rdma.devices_per_pod if rdma else 1
        env += _env(NCCL_IB_DISABLE="0")
        if rdma and rdma.hcas:
            env += _env(NCCL_IB_HCA=",".join(rdma.hcas))
        if rdma and rdma.gid_index is not None:
            env += _env(NCCL_IB_GID_INDEX=str(rdma.gid_index))
        annotations = {MULTUS_NETWORKS: ",".join(rdma.networks)} if rdma and rdma.networks else None
        return PodOverride(resources={resource: devices}, env=env, annotations=annotations)
    efa = network.efa
    if efa is None:  # the CRD refuses efa without its section; a spec written around it gets the error here
        raise ValueError("network.mode: efa needs network.efa.devicesPerPod (32 on p5/p5e/p5en, 4 on p4d)")
    # libfabric's EFA provider, with GPUDirect RDMA where the instance has it (p4d and later); aws-ofi-nccl in the
    # image maps NCCL's network onto it.
    env += _env(FI_PROVIDER="efa", FI_EFA_USE_DEVICE_RDMA="1")
    return PodOverride(resources={efa.resource_name: efa.devices_per_pod}, env=env)
