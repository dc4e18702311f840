"""Dynamic volumes on the real node: a provisioner for the `grpo-node-local` StorageClass.

KWOK's default StorageClass binds claims to PVs that exist only on paper. Pods of the real node need
real directories: for each claim of this class, a directory under the node's volumes folder (mode 0777,
as the local-path provisioner makes them, so the trainer's uid can write a root-created directory) and a
hostPath PV bound to the claim. A released PV is deleted with its directory (reclaim policy Delete).

Run: python -m grpo_devcluster.node_volumes --kubeconfig FILE --root DIR
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .kubeapi import ApiError, KubeApi

STORAGE_CLASS = "grpo-node-local"
PROVISIONER = "devcluster.grpo.dev/node-local"

log = logging.getLogger("node-volumes")


def storage_class() -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}


def volume_dir(root: Path, claim: dict[str, Any]) -> Path:
    meta = claim["metadata"]
    return root / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"


def volume_for_claim(claim: Mapping[str, Any], provisioner: str, host_path: Mapping[str, str]) -> dict[str, Any]:
    """Pure: a PV of the claim's size, modes and class, pre-bound to it (reclaim policy Delete)."""
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
        "spec": {
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec["storageClassName"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": meta["name"],
                         "namespace": meta["namespace"], "uid": meta["uid"]},
            "hostPath": dict(host_path),
        },
    }


def persistent_volume(root: Path, claim: dict[str, Any]) -> dict[str, Any]:
    """Pure: the PV for `claim`, a directory of the node, bound to it."""
    return volume_for_claim(claim, PROVISIONER, {"path": str(volume_dir(root, claim)), "type": "Directory"})


def provision(api: KubeApi, root: Path, claim: dict[str, Any]) -> None:
    directory = volume_dir(root, claim)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o777)
    try:
        api.create(persistent_volume(root, claim))
        log.info("provisioned %s for %s/%s", directory, claim["metadata"]["namespace"], claim["metadata"]["name"])
    except ApiError as e:  # a conflict: provisioned by an earlier pass
        if e.status != 409:
            raise


def reclaim(api: KubeApi, pv: dict[str, Any]) -> None:
    path = Path(pv["spec"]["hostPath"]["path"])
    shutil.rmtree(path, ignore_errors=True)
    api.delete("persistentvolumes", pv["metadata"]["name"])
    log.info("deleted %s and %s", pv["metadata"]["name"], path)


def reconcile_once(api: KubeApi, root: Path) -> str:
    """Provision what lacks a volume, reclaim what was released; returns the claims' list resourceVersion."""
    claims = api.list("persistentvolumeclaims")
    for claim in claims["items"]:
        spec = claim["spec"]
        if (spec.get("storageClassName") == STORAGE_CLASS and not spec.get("volumeName")
                and not claim["metadata"].get("deletionTimestamp")):
            provision(api, root, claim)
    for pv in api.items("persistentvolumes"):
        provisioned = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
        if provisioned == PROVISIONER and (pv.get("status") or {}).get("phase") == "Released":
            reclaim(api, pv)
    return claims["metadata"]["resourceVersion"]


def serve(api: KubeApi, reconcile_once: Callable[[], str], interval: float, logger: logging.Logger) -> None:
    """Run a provisioner's passes forever: one at once, then one whenever a claim changes (the watch returns
    on its first event) or `interval` is up, for what no claim event announces (a volume Released after its claim
    went). Shared by the cloud profile's zonal provisioner."""
    while True:
        try:
            version = reconcile_once()
            for _ in api.watch("persistentvolumeclaims", resource_version=version, seconds=interval):
                break
        except Exception:  # the API server restarting, a transient conflict: try again next pass
            logger.exception("provisioning pass failed")
            time.sleep(interval)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    api = KubeApi.from_kubeconfig(args.kubeconfig)
    args.root.mkdir(parents=True, exist_ok=True)
    serve(api, lambda: reconcile_once(api, args.root), args.interval, log)


if __name__ == "__main__":
    main()
