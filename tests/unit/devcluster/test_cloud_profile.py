"""The cloud-like profile's nodes and its zonal provisioner's decisions (pure; the e2e tests run them for real)."""

from __future__ import annotations

from grpo_devcluster import cloud_profile as cloud
from grpo_devcluster.zonal_volumes import needs_volume, persistent_volume, refusal, wanted_zone


def _claim(storage_class: str, modes: list[str], selected: str | None = None, volume: str | None = None) -> dict:
    annotations = {"volume.kubernetes.io/selected-node": selected} if selected else {}
    spec = {"storageClassName": storage_class, "accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1", "annotations": annotations}, "spec": spec}


def test_gpu_nodes_carry_gfd_labels_and_gkes_taint_and_no_label_of_ours() -> None:
    nodes = {n["metadata"]["name"]: n for n in cloud.node_manifests()}
    gpu = [n for n in nodes.values() if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert gpu and all(n["spec"]["taints"] == [cloud.GPU_TAINT] for n in gpu)
    assert all({cloud.GFD_PRODUCT, cloud.GFD_MEMORY, cloud.GFD_DRIVER_MAJOR} <= n["metadata"]["labels"].keys()
               for n in gpu)
    assert not any(k.startswith("grpo.dev/") for n in nodes.values() for k in n["metadata"]["labels"])
    assert {n["metadata"]["labels"][cloud.ZONE_LABEL] for n in nodes.values()} == set(cloud.ZONES)


def test_a_zonal_disk_waits_for_the_scheduler_and_goes_to_the_selected_nodes_zone() -> None:
    zones = {"node-c": "us-central1-c"}
    waiting = _claim(cloud.ZONAL_CLASS, ["ReadWriteOnce"])
    assert needs_volume(waiting) and wanted_zone(waiting, zones) is None
    chosen = _claim(cloud.ZONAL_CLASS, ["ReadWriteOnce"], selected="node-c")
    volume = persistent_volume(chosen, wanted_zone(chosen, zones))
    (term,) = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": cloud.ZONE_LABEL, "operator": "In", "values": ["us-central1-c"]}]
    assert volume["spec"]["claimRef"]["uid"] == "u1" and volume["spec"]["storageClassName"] == cloud.ZONAL_CLASS
    assert not needs_volume(_claim(cloud.ZONAL_CLASS, ["ReadWriteOnce"], volume="pv"))


def test_shared_files_bind_anywhere_and_a_disk_refuses_many_nodes() -> None:
    shared = persistent_volume(_claim(cloud.SHARED_CLASS, ["ReadWriteMany"]), None)
    assert "nodeAffinity" not in shared["spec"]
    why = refusal(_claim(cloud.ZONAL_CLASS, ["ReadWriteMany"]))
    assert why is not None and "ReadWriteMany" in why and cloud.SHARED_CLASS in why
    assert refusal(_claim(cloud.SHARED_CLASS, ["ReadWriteMany"])) is None
