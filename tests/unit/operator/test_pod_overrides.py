"""spec.pods and spec.network rendered into the pods: each override where it belongs, ours kept, and what the
capacity check and the namespace's Pod Security level make of them."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec, PodOverride
from grpo_operator.network import MULTUS_NETWORKS
from grpo_operator.plan import Plan, PlanError
from grpo_operator.pod_security import ENFORCE_LABEL, asks, enforced_level, refusal_message, refused
from grpo_operator.reconcile.capacity import NodeView, capacity_shortfalls
from grpo_operator.render import render_export_job, render_preflight_job, render_rayjob
from grpojob_fixtures import example_body, plan_of, spec_with

CACHE = {"name": "model-cache", "mountPath": "/cache", "readOnly": True,
         "hostPath": {"path": "/mnt/models", "type": "Directory"}}


def _job(edit: Any) -> tuple[GRPOJobSpec, Plan]:
    spec = spec_with(example_body("reference-disaggregated"), edit)
    return spec, plan_of(spec)


def _templates(spec: GRPOJobSpec, plan: Plan) -> dict[str, dict[str, Any]]:
    cluster = render_rayjob(spec, plan)["spec"]["rayClusterSpec"]
    found = {g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}
    found["head"] = cluster["headGroupSpec"]["template"]
    found["preflight"] = render_preflight_job(spec, plan, {})["spec"]["template"]
    found["converter"] = render_export_job(spec, plan)["spec"]["template"]
    return found


def _env(template: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in template["spec"]["containers"][0].get("env", [])}


def test_an_actor_override_reaches_the_actor_pods_and_no_other() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["pods"] = {"actor": {
            "resources": {"example.com/rdma": 2}, "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
            "volumes": [CACHE], "shmSize": "64Gi", "labels": {"team": "ml", "grpo.dev/role": "mine"},
            "annotations": {"example.com/note": "x"}, "capabilities": ["IPC_LOCK"],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "grpo", "effect": "NoSchedule"}],
            "nodeAffinity": [{"key": "example.com/fabric", "operator": "In", "values": ["ib"]}],
        }}

    templates = _templates(*_job(edit))
    actor = templates["actor"]
    container, pod = actor["spec"]["containers"][0], actor["spec"]
    assert container["resources"]["requests"]["example.com/rdma"] == "2"
    assert container["resources"]["limits"]["example.com/rdma"] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"  # ours untouched
    assert _env(actor)["NCCL_DEBUG"] == "INFO" and "GRPO_JOB_NAME" in _env(actor)
    assert {"name": "model-cache", "hostPath": {"path": "/mnt/models", "type": "Directory"}} in pod["volumes"]
    assert {"name": "model-cache", "mountPath": "/cache", "readOnly": True} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert actor["metadata"]["labels"]["team"] == "ml"
    assert actor["metadata"]["labels"]["grpo.dev/role"] == "actor"  # ours win
    assert actor["metadata"]["annotations"]["example.com/note"] == "x"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is True  # a setcap binary's file capability
    assert {"key": "dedicated", "operator": "Equal", "value": "grpo", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all({"key": "example.com/fabric", "operator": "In", "values": ["ib"]}
                          in t["matchExpressions"] for t in terms)  # with the driver floor's, in every term
    for other in ("rollout", "reward", "head", "preflight", "converter"):
        spec = templates[other]["spec"]
        assert "model-cache" not in str(spec) and "IPC_LOCK" not in str(spec) and "example.com/rdma" not in str(spec)


def test_preflight_and_converter_overrides_reach_their_pods() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["pods"] = {"preflight": {"env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]},
                       "converter": {"volumes": [{**CACHE, "hostPath": None, "emptyDir": {}}]}}

    templates = _templates(*_job(edit))
    assert _env(templates["preflight"])["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in _env(templates["converter"])
    assert {"name": "model-cache", "emptyDir": {}} in templates["converter"]["spec"]["volumes"]


def test_rdma_renders_devices_nccl_env_and_multus_on_every_gpu_role_only() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["network"] = {"mode": "rdma", "socketInterface": "net1",
                          "rdma": {"resourceName": "rdma/ib", "devicesPerPod": 4, "hcas": ["mlx5_0", "mlx5_1"],
                                   "gidIndex": 3, "networks": ["ib-a", "ib-b"]}}
        raw["pods"] = {"rollout": {"env": [{"name": "NCCL_IB_HCA", "value": "mlx5_2"}]}}  # the user's wins

    templates = _templates(*_job(edit))
    for role in ("actor", "rollout", "reward"):
        template = templates[role]
        container = template["spec"]["containers"][0]
        assert container["resources"]["limits"]["rdma/ib"] == "4"
        # No IPC_LOCK: a non-root process gets no ambient capabilities; it would only force a privileged namespace.
        assert "add" not in container["securityContext"]["capabilities"]
        assert template["metadata"]["annotations"][MULTUS_NETWORKS] == "ib-a,ib-b"
        env = _env(template)
        assert (env["NCCL_IB_DISABLE"], env["NCCL_IB_GID_INDEX"], env["NCCL_SOCKET_IFNAME"]) == ("0", "3", "net1")
        assert env["GLOO_SOCKET_IFNAME"] == "net1"
        assert env["NCCL_IB_HCA"] == ("mlx5_2" if role == "rollout" else "mlx5_0,mlx5_1")
    for role in ("head", "preflight", "converter"):
        assert "NCCL_IB_DISABLE" not in _env(templates[role]) and "rdma/ib" not in str(templates[role])


def test_efa_renders_its_devices_and_libfabric_env_and_tcp_turns_ib_off() -> None:
    efa = _templates(*_job(lambda raw: raw.update(network={"mode": "efa", "efa": {"devicesPerPod": 32}})))["actor"]
    assert efa["spec"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert (_env(efa)["FI_PROVIDER"], _env(efa)["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
    assert "add" not in efa["spec"]["containers"][0]["securityContext"]["capabilities"]  # EFA needs no IPC_LOCK
    tcp = _templates(*_job(lambda raw: raw.update(network={"mode": "tcp"})))["actor"]
    assert _env(tcp)["NCCL_IB_DISABLE"] == "1"
    plain = _templates(*_job(None))["actor"]
    assert "NCCL_IB_DISABLE" not in _env(plain)  # no network section: nothing rendered


def test_efa_without_its_section_is_refused_naming_the_field() -> None:
    raw = example_body("reference-disaggregated")["spec"]
    spec = GRPOJobSpec.model_validate({**raw, "network": {"mode": "efa"}})  # the CRD refuses it; a spec around it
    with pytest.raises(PlanError, match=r"spec\.network\.efa: .*devicesPerPod"):
        plan_of(spec)


def _node(name: str, extra: dict[str, str]) -> NodeView:
    return NodeView.of({"metadata": {"name": name, "labels": {}}, "spec": {},
                        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", **extra}}})


def test_the_capacity_check_counts_extended_resources_the_overrides_ask_for() -> None:
    _, plan = _job(lambda raw: raw.update(network={"mode": "rdma", "rdma": {"devicesPerPod": 2}}))
    without = capacity_shortfalls(plan, [_node("n0", {}), _node("n1", {})])
    assert [s.role for s in without] == ["actor", "rollout", "reward"]
    assert "2 rdma/ib" in without[0].message and "0 rdma/ib" in without[0].message
    assert capacity_shortfalls(plan, [_node("n0", {"rdma/ib": "4"}), _node("n1", {"rdma/ib": "4"})]) == []


def test_hostnetwork_hostpath_and_capabilities_need_the_level_that_admits_them() -> None:
    actor = PodOverride.model_validate({"hostNetwork": True, "volumes": [CACHE], "capabilities": ["IPC_LOCK"]})
    head = PodOverride.model_validate({"capabilities": ["NET_BIND_SERVICE", "CHOWN"]})
    wanted = asks("actor", actor) + asks("head", head)
    assert [(r.field, r.needs) for r in wanted] == [
        ("pods.actor.hostNetwork", "privileged"), ("pods.actor.volumes[model-cache].hostPath", "privileged"),
        ("pods.actor.capabilities (IPC_LOCK)", "privileged"),
        ("pods.head.capabilities (CHOWN, NET_BIND_SERVICE)", "baseline")]
    assert refused("privileged", wanted) == []
    assert [r.field for r in refused("baseline", wanted)] == [r.field for r in wanted[:3]]
    assert refused("restricted", wanted) == wanted
    assert refused("no-such-level", wanted) == wanted  # read as restricted
    assert enforced_level({}) == "privileged" and enforced_level({ENFORCE_LABEL: "baseline"}) == "baseline"
    message = refusal_message("team-a", "restricted", wanted)
    assert "spec.pods.actor.hostNetwork" in message and f"{ENFORCE_LABEL}=restricted" in message
    assert f"kubectl label namespace team-a --overwrite {ENFORCE_LABEL}=privileged" in message


def test_host_network_is_all_the_ray_pods_or_none_and_renders_cluster_dns() -> None:
    everywhere = {role: {"hostNetwork": True} for role in ("head", "actor", "rollout", "reward")}
    templates = _templates(*_job(lambda raw: raw.update(pods=everywhere)))
    for role in ("head", "actor", "rollout", "reward"):
        assert (templates[role]["spec"]["hostNetwork"], templates[role]["spec"]["dnsPolicy"]) == (
            True, "ClusterFirstWithHostNet")
    for role in ("preflight", "converter"):
        assert "hostNetwork" not in templates[role]["spec"]
    with pytest.raises(PlanError, match=r"spec\.pods: hostNetwork is set for actor but not for head, rollout, reward"):
        _job(lambda raw: raw.update(pods={"actor": {"hostNetwork": True}}))


def test_a_runtimes_volume_and_the_jobs_at_one_path_are_refused_naming_both() -> None:
    from grpo_operator.api import GRPORuntimeSpec
    from grpo_operator.runtimes import apply_runtime
    runtime = GRPORuntimeSpec.model_validate({"pods": {"actor": {"volumes": [
        {"name": "cache", "mountPath": "/cache", "emptyDir": {}}]}}})
    spec = spec_with(example_body("reference-disaggregated"), lambda raw: raw.update(pods={"actor": {"volumes": [
        {"name": "scratch", "mountPath": "/cache", "emptyDir": {}}]}}))
    with pytest.raises(PlanError, match=r"spec\.pods\.actor\.volumes: cache and scratch both mount /cache"):
        plan_of(apply_runtime(spec, runtime)[0])


def test_the_jobs_own_env_wins_over_what_the_network_renders_and_our_amounts_are_never_overwritten() -> None:
    def edit(raw: dict[str, Any]) -> None:
        raw["env"] = [{"name": "NCCL_SOCKET_IFNAME", "value": "eth9"}]
        raw["network"] = {"mode": "efa", "socketInterface": "eth0",
                          "efa": {"devicesPerPod": 1, "resourceName": "nvidia.com/gpu"}}  # around the CRD's rule

    actor = _templates(*_job(edit))["actor"]
    assert _env(actor)["NCCL_SOCKET_IFNAME"] == "eth9" and _env(actor)["GLOO_SOCKET_IFNAME"] == "eth0"
    assert actor["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_claims_and_configmaps_the_overrides_mount_are_dependencies_said_by_field() -> None:
    from grpo_operator.reconcile.children import missing_dependencies
    spec, plan = _job(lambda raw: raw.update(pods={
        "actor": {"volumes": [{"name": "cache", "mountPath": "/cache", "persistentVolumeClaim": {"claimName": "mc"}}]},
        "head": {"volumes": [{"name": "nccl", "mountPath": "/nccl", "configMap": {"name": "nccl-topo"}}]}}))
    base = {"models", "datasets", "exports"}
    problems = missing_dependencies(spec, plan, base, {})
    assert [(field, reason) for field, reason, _ in problems] == [
        ("pods.actor.volumes[cache].persistentVolumeClaim.claimName", "MissingPersistentVolumeClaim"),
        ("pods.head.volumes[nccl].configMap.name", "MissingConfigMap")]
    assert "ConfigMap 'nccl-topo' does not exist" in problems[1][2]
    assert missing_dependencies(spec, plan, base | {"mc"}, {"nccl-topo": {"topo.xml"}}) == []
