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
from pathlib import Path
from typing import Any

STORAGE_CLASS = "grpo-node-local"
PROVISIONER = "devcluster.grpo.dev/node-local"

log = logging.getLogger("node-volumes")


def storage_class() -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}


def volume_dir(root: Path, claim: dict[str, Any]) -> Path:
    meta = claim["metadata"]
    return root / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"


def persistent_volume(root: Path, claim: dict[str, Any]) -> dict[str, Any]:
    """Pure: the PV for `claim`, bound to it."""
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": meta["name"],
                         "namespace": meta["namespace"], "uid": meta["uid"]},
            "hostPath": {"path": str(volume_dir(root, claim)), "type": "Directory"},
        },
    }


def provision(core: Any, root: Path, claim: dict[str, Any]) -> None:
    directory = volume_dir(root, claim)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o777)
    body = persistent_volume(root, claim)
    try:
        core.create_persistent_volume(body)
        log.info("provisioned %s for %s/%s", directory, claim["metadata"]["namespace"], claim["metadata"]["name"])
    except Exception as e:  # a conflict: provisioned by an earlier pass
        if getattr(e, "status", None) != 409:
            raise


def reclaim(core: Any, pv: dict[str, Any]) -> None:
    path = Path(pv["spec"]["hostPath"]["path"])
    shutil.rmtree(path, ignore_errors=True)
    core.delete_persistent_volume(pv["metadata"]["name"])
    log.info("deleted %s and %s", pv["metadata"]["name"], path)


def reconcile_once(core: Any, root: Path) -> None:
    from kubernetes.client import ApiClient

    api = ApiClient()
    claims = api.sanitize_for_serialization(core.list_persistent_volume_claim_for_all_namespaces())["items"]
    for claim in claims:
        spec = claim["spec"]
        if (spec.get("storageClassName") == STORAGE_CLASS and not spec.get("volumeName")
                and not claim["metadata"].get("deletionTimestamp")):
            provision(core, root, claim)
    volumes = api.sanitize_for_serialization(core.list_persistent_volume())["items"]
    for pv in volumes:
        provisioned = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
        if provisioned == PROVISIONER and (pv.get("status") or {}).get("phase") == "Released":
            reclaim(core, pv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from kubernetes import client, config

    config.load_kube_config(args.kubeconfig)
    core = client.CoreV1Api()
    args.root.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            reconcile_once(core, args.root)
        except Exception:  # the API server restarting, a transient conflict: try again next pass
            log.exception("provisioning pass failed")
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
