"""The rehearsal's checks that need the live Ray cluster: verl's pools placed for real, each bundle probed.

Runs in the job's driver (the head pod, as `grpo-train --rehearsal`), connected to the job's Ray cluster:
- the pools verl would create (pools.verl_pools) must fit the Ray nodes, each bundle on a node of its role;
- they are then created through verl's own RayResourcePool with our role placement installed, exactly as
  training creates them, and a probe task runs in every bundle: which node it landed on, which role
  resources that node advertises, the GPUs Ray gave it and the NVIDIA devices the pod really has;
- the actor bundles write into the checkpoint directory and the driver reads what they wrote: verl's
  driver and every actor rank write checkpoints, so they must see one volume.
"""

from __future__ import annotations

import glob
import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_trainer.preflight.verdict import Check
from grpo_trainer.rehearsal.pools import Pool, RayNode, unplaceable

log = logging.getLogger(__name__)

PLACEMENT_FIELD = "spec.placement.roles"
CHECKPOINT_FIELD = "spec.checkpoints.volume"


@dataclass(frozen=True)
class BundleReport:
    """What a probe task in one bundle saw."""

    pool: str
    role: str | None
    placement_group: int
    bundle: int
    node_id: str
    hostname: str
    node_resources: tuple[str, ...]  # the grpo.dev/* resources its Ray node advertises
    gpu_ids: tuple[str, ...]
    nvidia_devices: int
    wrote: str | None


def ray_nodes() -> list[RayNode]:
    import ray

    return [RayNode(n["NodeID"], dict(n["Resources"])) for n in ray.nodes() if n.get("Alive")]


def probe(marker_dir: str | None, name: str) -> dict[str, Any]:
    """Runs in a bundle: where am I, what GPU did Ray give me, what devices does the pod have."""
    import ray

    context = ray.get_runtime_context()
    node_id = context.get_node_id()
    resources = next((n["Resources"] for n in ray.nodes() if n["NodeID"] == node_id), {})
    wrote = None
    if marker_dir is not None:
        path = Path(marker_dir) / name
        path.write_text(node_id)
        wrote = str(path)
    return {
        "node_id": node_id,
        "hostname": socket.gethostname(),
        "node_resources": sorted(k for k in resources if k.startswith("grpo.dev/")),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        "nvidia_devices": len(glob.glob("/dev/nvidia[0-9]*")),
        "wrote": wrote,
    }


def _create_placement_groups(pool: Pool, timeout_s: float) -> tuple[list[Any] | None, str]:
    """verl's own RayResourcePool.get_placement_groups (our patch installed), bounded by `timeout_s`."""
    from verl.single_controller.ray.base import RayResourcePool

    resource_pool = RayResourcePool(process_on_nodes=list(pool.process_on_nodes), use_gpu=True,
                                    max_colocate_count=pool.cpus_per_bundle, name_prefix=pool.name)
    result: dict[str, Any] = {}

    def create() -> None:
        try:
            result["pgs"] = resource_pool.get_placement_groups()
        except Exception as e:  # reported as the pool's failure
            result["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=create, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "pgs" in result:
        return result["pgs"], ""
    _remove_pool_groups(pool.name)
    return None, result.get("error") or f"its placement groups were not ready within {timeout_s:.0f}s"


def _remove_pool_groups(prefix: str) -> None:
    import ray
    from ray.util.placement_group import PlacementGroup

    for pg_id, info in ray.util.placement_group_table().items():
        if info.get("name", "").startswith(prefix) and info.get("state") != "REMOVED":
            ray.util.remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))


def place_and_probe(pools: list[Pool], role_resources: Mapping[str, str], checkpoint_dir: str,
                    timeout_s: float = 120.0) -> tuple[list[Check], list[BundleReport]]:
    """Create every pool as training would, probe each bundle, and remove the pools again."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from grpo_trainer import placement

    problems = unplaceable(pools, ray_nodes(), role_resources)
    if problems:
        return [Check("ray.placement", PLACEMENT_FIELD, False, "; ".join(problems), "",
                      "each role's worker group must offer its GPUs, 3 CPUs per GPU and its grpo.dev/<role> "
                      "resource; check the role's pods are Running and their nodeSelector/resources")], []
    placement.install(role_resources)
    marker_dir = os.path.join(checkpoint_dir, f".rehearsal-{uuid.uuid4().hex[:8]}")
    os.makedirs(marker_dir, exist_ok=True)
    remote_probe = ray.remote(num_cpus=1, num_gpus=1)(probe)
    checks: list[Check] = []
    reports: list[BundleReport] = []
    try:
        for pool in pools:
            pgs, error = _create_placement_groups(pool, timeout_s)
            if pgs is None:
                checks.append(Check(f"ray.placement.{pool.name}", PLACEMENT_FIELD, False,
                                    f"pool {pool.name} ({pool.role}): {error}", "",
                                    "see `ray status` on the head; the pool's role pods may be missing"))
                continue
            pending = []
            for pg_index, pg in enumerate(pgs):
                for bundle in range(pg.bundle_count):
                    marker = f"{pool.name}-{pg_index}-{bundle}" if pool.role == "actor" else None
                    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
                    ref = remote_probe.options(scheduling_strategy=strategy).remote(
                        marker_dir if marker else None, marker or "")
                    pending.append((pg_index, bundle, ref))
            for pg_index, bundle, ref in pending:
                seen = ray.get(ref, timeout=timeout_s)
                reports.append(BundleReport(pool.name, pool.role, pg_index, bundle, seen["node_id"], seen["hostname"],
                                            tuple(seen["node_resources"]), tuple(seen["gpu_ids"]),
                                            seen["nvidia_devices"], seen["wrote"]))
            checks.append(placement_check(pool, [r for r in reports if r.pool == pool.name], role_resources))
            _remove_pool_groups(pool.name)
        checks += gpu_checks(reports)
        checks.append(checkpoint_check(marker_dir, reports))
    finally:
        placement.uninstall()
        for leftover in Path(marker_dir).glob("*"):
            leftover.unlink(missing_ok=True)
        Path(marker_dir).rmdir()
    return checks, reports


def placement_check(pool: Pool, reports: list[BundleReport], role_resources: Mapping[str, str]) -> Check:
    """Pure: every bundle of the pool ran on a node advertising the pool's role resource."""
    resource = role_resources.get(pool.role or "")
    hosts = sorted({r.hostname for r in reports})
    if resource is None:
        return Check(f"ray.placement.{pool.name}", PLACEMENT_FIELD, True,
                     f"pool {pool.name} is not pinned to a role; its {len(reports)} bundles ran on {hosts}")
    strays = [r for r in reports if resource not in r.node_resources]
    if strays:
        where = sorted({r.hostname for r in strays})
        return Check(f"ray.placement.{pool.name}", PLACEMENT_FIELD, False,
                     f"{len(strays)} of {len(reports)} bundles of pool {pool.name} ({pool.role}) ran on {where}, "
                     f"which do not advertise {resource}", "",
                     "the role placement patch did not reach verl's pools: report this")
    return Check(f"ray.placement.{pool.name}", PLACEMENT_FIELD, True,
                 f"all {len(reports)} bundles of pool {pool.name} ({pool.role}) ran on its role's pods {hosts}")


def gpu_checks(reports: list[BundleReport]) -> list[Check]:
    """Pure: per role, the GPUs Ray assigned against the NVIDIA devices the pods really have.

    Where the pods have no NVIDIA device at all (a CPU node, as in the local cluster) it is reported,
    not failed: there are no GPUs to check. Where some are visible, each bundle must see its GPU.
    """
    checks = []
    for role in sorted({r.role or "unpinned" for r in reports}):
        mine = [r for r in reports if (r.role or "unpinned") == role]
        assigned = sum(len(r.gpu_ids) for r in mine)
        devices = max((r.nvidia_devices for r in mine), default=0)
        name = f"gpus.{role}"
        if devices == 0:
            checks.append(Check(name, PLACEMENT_FIELD, True,
                                f"Ray assigned {assigned} GPUs to {role} bundles, but its pods have no NVIDIA device: "
                                "a CPU-only node, or no NVIDIA device plugin/runtime; GPU work cannot run here"))
        elif any(r.nvidia_devices < len(r.gpu_ids) for r in mine):
            short = [r.hostname for r in mine if r.nvidia_devices < len(r.gpu_ids)]
            checks.append(Check(name, PLACEMENT_FIELD, False,
                                f"{role} pods {sorted(set(short))} see fewer NVIDIA devices than Ray assigned", "",
                                "the pod's nvidia.com/gpu request and the node's device plugin disagree"))
        else:
            checks.append(Check(name, PLACEMENT_FIELD, True,
                                f"{assigned} GPUs assigned to {role} bundles, each visible in its pod"))
    return checks


def checkpoint_check(marker_dir: str, reports: list[BundleReport]) -> Check:
    """Every actor bundle's marker, written on its own pod, is read back by the driver on the head."""
    writers = [r for r in reports if r.wrote]
    missing = [r for r in writers if not Path(r.wrote or "").is_file()]
    if missing:
        return Check("checkpoints.shared", CHECKPOINT_FIELD, False,
                     f"files written by actor pods {sorted({r.hostname for r in missing})} into the checkpoint "
                     f"directory are not visible to the driver on {socket.gethostname()}", marker_dir,
                     "the checkpoint claim must be one volume shared by the head and every actor pod "
                     "(ReadWriteMany, or all pods on one node)")
    return Check("checkpoints.shared", CHECKPOINT_FIELD, True,
                 f"the driver read what {len(writers)} actor bundles wrote into the checkpoint directory")
