"""The cloud profile's volume provisioner: zonal disks bound where the scheduler puts their first pod, and shared
file storage reachable from every zone.

It plays the cloud's CSI controller (PD, EBS) and nothing more: the decisions that matter are Kubernetes' own.
For a `standard-rwo` claim (WaitForFirstConsumer) the real kube-scheduler's volume binding picks a node for the
first pod that mounts it and writes it into the claim (`volume.kubernetes.io/selected-node`); only then is a PV
made, in that node's zone, with the zone as its node affinity, so every later pod mounting the claim is held to
that zone by the scheduler, as on GKE or EKS. A disk attaches to one node: a ReadWriteMany or ReadOnlyMany
claim of the zonal class is refused with an Event, as the PD and EBS drivers refuse it. `shared-rwx` claims are
bound at once with no affinity. A released PV is deleted (reclaim policy Delete).

The PVs exist only on paper (KWOK's pods mount nothing): a hostPath under /nonexistent.

Run: python -m grpo_devcluster.zonal_volumes --kubeconfig FILE
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .cloud_profile import SHARED_CLASS, SHARED_PROVISIONER, ZONAL_CLASS, ZONAL_PROVISIONER, ZONE_LABEL
from .kubeapi import ApiError, KubeApi
from .node_volumes import serve, volume_for_claim

SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONERS = {ZONAL_CLASS: ZONAL_PROVISIONER, SHARED_CLASS: SHARED_PROVISIONER}
SINGLE_NODE_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})

log = logging.getLogger("zonal-volumes")


def refusal(claim: Mapping[str, Any]) -> str | None:
    """Why the claim's class cannot provide it, or None: a zonal disk attaches to one node at a time."""
    spec = claim.get("spec") or {}
    modes = set(spec.get("accessModes") or ["ReadWriteOnce"])
    if spec.get("storageClassName") == ZONAL_CLASS and not modes <= SINGLE_NODE_MODES:
        return (f"StorageClass {ZONAL_CLASS} provides zonal disks that attach to one node: access modes "
                f"{sorted(modes)} are not supported; ask for ReadWriteOnce, or use StorageClass {SHARED_CLASS}")
    return None


def wanted_zone(claim: Mapping[str, Any], zones: Mapping[str, str]) -> str | None:
    """The zone a zonal claim's disk goes to: that of the node the scheduler selected (None while none is)."""
    node = ((claim.get("metadata") or {}).get("annotations") or {}).get(SELECTED_NODE)
    return zones.get(node) if node else None


def persistent_volume(claim: Mapping[str, Any], zone: str | None) -> dict[str, Any]:
    """Pure: the PV for `claim`, pre-bound to it; held to `zone` when it is a zonal disk."""
    volume = volume_for_claim(claim, PROVISIONERS[claim["spec"]["storageClassName"]],
                              {"path": f"/nonexistent/devcluster/pvc-{claim['metadata']['uid']}"})
    if zone is not None:
        volume["metadata"]["labels"] = {ZONE_LABEL: zone}
        volume["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}}
    return volume


def refusal_event(claim: Mapping[str, Any], message: str) -> dict[str, Any]:
    meta = claim["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"]},
        "reason": "ProvisioningFailed",
        "message": f"failed to provision volume with StorageClass {ZONAL_CLASS!r}: {message}",
        "type": "Warning",
        "source": {"component": ZONAL_PROVISIONER},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def needs_volume(claim: Mapping[str, Any]) -> bool:
    spec, meta = claim.get("spec") or {}, claim.get("metadata") or {}
    return (spec.get("storageClassName") in PROVISIONERS and not spec.get("volumeName")
            and not meta.get("deletionTimestamp"))


class Provisioner:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.refused: set[str] = set()  # claims told once why they get no volume

    def reconcile_once(self) -> str:
        """Provision what lacks a volume, reclaim what was released; returns the claims' list resourceVersion."""
        claims = self.api.list("persistentvolumeclaims")
        waiting = [c for c in claims["items"] if needs_volume(c)]
        zones = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE_LABEL, "")
                 for n in self.api.items("nodes")} if waiting else {}
        for claim in waiting:
            self._provision(claim, zones)
        for pv in self.api.items("persistentvolumes"):
            provisioned = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
            if provisioned in PROVISIONERS.values() and (pv.get("status") or {}).get("phase") == "Released":
                self.api.delete("persistentvolumes", pv["metadata"]["name"])
                log.info("deleted released %s", pv["metadata"]["name"])
        return claims["metadata"]["resourceVersion"]

    def _provision(self, claim: dict[str, Any], zones: Mapping[str, str]) -> None:
        meta = claim["metadata"]
        why = refusal(claim)
        if why is not None:
            if meta["uid"] not in self.refused:
                self.api.create(refusal_event(claim, why))
                self.refused.add(meta["uid"])
            return
        zone = None
        if claim["spec"]["storageClassName"] == ZONAL_CLASS:
            zone = wanted_zone(claim, zones)
            if not zone:
                return  # no pod placed yet: WaitForFirstConsumer
        try:
            self.api.create(persistent_volume(claim, zone))
            log.info("provisioned %s/%s in %s", meta["namespace"], meta["name"], zone or "every zone")
        except ApiError as e:  # a conflict: provisioned by an earlier pass
            if e.status != 409:
                raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    provisioner = Provisioner(KubeApi.from_kubeconfig(args.kubeconfig))
    serve(provisioner.api, provisioner.reconcile_once, args.interval, log)


if __name__ == "__main__":
    main()
