"""The KubeRay RayJob: entrypoint, lifecycle fields, head and one pinned worker group per role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_operator.api import GRPOJobSpec, PodMetadata
from grpo_operator.plan import Plan
from grpo_operator.render import render_children, render_export_job, render_preflight_job, render_rayjob
from grpo_operator.render.rayjob import RAY_VERSION
from grpojob_fixtures import example_body, pinned_to_pools, plan_of, spec_with


def _groups(rayjob: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["groupName"]: g for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]}


def _container(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = template["spec"]["containers"]
    return container


def test_rayjob_runs_grpo_train_and_shuts_down_after(reference: tuple[GRPOJobSpec, Plan]) -> None:
    rj = render_rayjob(*reference)
    assert (rj["apiVersion"], rj["kind"], rj["metadata"]["name"]) == ("ray.io/v1", "RayJob", "qwen2-7b-reference")
    assert rj["spec"]["entrypoint"] == "grpo-train --config_path /etc/grpo/verl.yaml"
    assert rj["spec"]["shutdownAfterJobFinishes"] is True
    # Kept 5 minutes after the last failure for its logs; the operator sets 0 once training completed.
    assert rj["spec"]["ttlSecondsAfterFinished"] == 300
    assert rj["spec"]["backoffLimit"] == 2
    assert rj["spec"]["suspend"] is False
    assert "activeDeadlineSeconds" not in rj["spec"]
    assert "ownerReferences" not in rj["metadata"]


def test_rayjob_worker_group_advertises_role_resource(reference: tuple[GRPOJobSpec, Plan]) -> None:
    groups = _groups(render_rayjob(*reference))
    assert list(groups) == ["actor", "rollout", "reward"]
    assert groups["actor"]["resources"] == {"grpo.dev/actor": "4"}
    assert groups["rollout"]["resources"] == {"grpo.dev/rollout": "2"}
    assert groups["reward"]["resources"] == {"grpo.dev/reward": "2"}
    for g in groups.values():
        # KubeRay refuses num-cpus/num-gpus/resources in rayStartParams beside `resources`.
        assert not set(g["rayStartParams"]) & {"num-cpus", "num-gpus", "memory", "resources"}
        assert g["replicas"] == g["minReplicas"] == g["maxReplicas"] == 1


def test_worker_pods_are_pinned_to_their_pool_with_gpu_limits() -> None:
    spec = spec_with(example_body("reference-disaggregated"), pinned_to_pools)
    groups = _groups(render_rayjob(spec, plan_of(spec)))
    pools = {name: g["template"]["spec"]["nodeSelector"] for name, g in groups.items()}
    assert pools == {
        "actor": {"grpo.dev/pool": "train"},
        "rollout": {"grpo.dev/pool": "rollout"},
        "reward": {"grpo.dev/pool": "rollout"},
    }
    actor = _container(groups["actor"]["template"])["resources"]
    assert actor["limits"] == {"cpu": "13", "memory": "136Gi", "nvidia.com/gpu": "4"}
    assert actor["requests"] == actor["limits"]
    for name, g in groups.items():
        assert g["template"]["metadata"]["labels"]["grpo.dev/role"] == name


def test_gpu_pods_tolerate_the_gpu_taint_and_require_a_new_enough_driver(
        reference: tuple[GRPOJobSpec, Plan]) -> None:
    groups = _groups(render_rayjob(*reference))
    for g in groups.values():
        pod = g["template"]["spec"]
        assert "nodeSelector" not in pod  # no label of ours: the examples run on any cluster with GPUs
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"matchExpressions": [{"key": "nvidia.com/cuda.driver.major", "operator": "DoesNotExist"}]} in terms


def test_every_pod_has_at_least_three_cpus_per_gpu(reference: tuple[GRPOJobSpec, Plan]) -> None:
    for g in _groups(render_rayjob(*reference)).values():
        limits = _container(g["template"])["resources"]["limits"]
        assert int(limits["cpu"]) >= 3 * int(limits["nvidia.com/gpu"])


def test_head_has_no_gpus_and_serves_metrics(reference: tuple[GRPOJobSpec, Plan]) -> None:
    head = render_rayjob(*reference)["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"] == {"num-gpus": "0", "dashboard-host": "0.0.0.0"}
    container = _container(head["template"])
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {"name": "grpo-metrics", "containerPort": 9400, "protocol": "TCP"} in container["ports"]
    # KubeRay takes the dashboard port from the head container; without it no job is submitted.
    assert {"name": "dashboard", "containerPort": 8265, "protocol": "TCP"} in container["ports"]


def _templates(rayjob: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"head": rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
            **{name: g["template"] for name, g in _groups(rayjob).items()}}


def _mounts_and_claims(template: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    mounts = {m["mountPath"]: m for m in _container(template)["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v}
    return mounts, claims


def test_pods_mount_the_contract_paths(reference: tuple[GRPOJobSpec, Plan]) -> None:
    for role, template in _templates(render_rayjob(*reference)).items():
        mounts, claims = _mounts_and_claims(template)
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert mounts["/etc/grpo/verl.yaml"]["subPath"] == "verl.yaml"
        assert volumes[mounts["/etc/grpo/verl.yaml"]["name"]]["configMap"] == {"name": "qwen2-7b-reference-verl"}
        assert mounts["/models"]["readOnly"] is True, role
        assert claims[mounts["/models"]["name"]] == "models"
        assert "/dev/shm" in mounts


def test_each_claim_is_mounted_only_where_it_is_read(reference: tuple[GRPOJobSpec, Plan]) -> None:
    where = {role: set(_mounts_and_claims(t)[0]) for role, t in _templates(render_rayjob(*reference)).items()}
    assert {role for role, paths in where.items() if "/data" in paths} == {"head"}
    assert {role for role, paths in where.items() if "/checkpoints" in paths} == {"head", "actor"}
    assert {role for role, paths in where.items() if "/models" in paths} == {"head", "actor", "rollout", "reward"}


def test_checkpoints_are_the_jobs_own_directory_read_write(reference: tuple[GRPOJobSpec, Plan]) -> None:
    templates = _templates(render_rayjob(*reference))
    for role in ("head", "actor"):
        mounts, claims = _mounts_and_claims(templates[role])
        checkpoints = mounts["/checkpoints"]
        assert checkpoints["readOnly"] is False
        assert checkpoints["subPath"] == "team-a/qwen2-7b-reference"
        assert claims[checkpoints["name"]] == "qwen2-7b-reference-checkpoints"
        data = mounts.get("/data")
        assert data is None or (data["readOnly"] is True and claims[data["name"]] == "datasets")


def test_head_follows_the_single_actor_pod_onto_its_node(colocated_body: dict[str, Any]) -> None:
    dedicated = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    spec = spec_with(colocated_body, lambda s: s["placement"]["roles"]["actor"].update(tolerations=[dedicated]))
    head = _templates(render_rayjob(spec, plan_of(spec, "qwen2-7b-length")))["head"]["spec"]
    (term,) = head["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": {"grpo.dev/job": "qwen2-7b-length", "grpo.dev/role": "actor"}},
                    "topologyKey": "kubernetes.io/hostname"}
    # The actor's node is tainted for GPU pods, and ExtendedResourceToleration gives a GPU-less head nothing.
    assert head["tolerations"] == [dedicated, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeAffinity" not in head["affinity"]  # it goes where the actor is; no driver of its own


def test_a_head_that_follows_the_actor_takes_the_actors_pool_not_its_own(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["placement"]["head"] = {"nodeSelector": {"pool": "cpu"}}
        s["placement"]["roles"]["actor"]["nodeSelector"] = {"pool": "gpu"}

    spec = spec_with(colocated_body, edit)
    head = _templates(render_rayjob(spec, plan_of(spec)))["head"]["spec"]
    assert head["nodeSelector"] == {"pool": "gpu"}  # a CPU-pool head could never share a GPU-pool actor's node
    free = spec_with(colocated_body, lambda s: s["placement"].update(head={"nodeSelector": {"pool": "cpu"}}))
    assert "nodeSelector" not in _templates(render_rayjob(free, plan_of(free)))["head"]["spec"]


def test_head_is_free_when_checkpoints_are_on_a_shared_filesystem(colocated_body: dict[str, Any]) -> None:
    volume = {"size": "1Ti", "accessModes": ["ReadWriteMany"]}
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"volume": volume}))
    head = _templates(render_rayjob(spec, plan_of(spec)))["head"]["spec"]
    assert "affinity" not in head and "tolerations" not in head


def test_a_claim_mounted_twice_is_one_volume(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s["data"].update(claimName="models"))
    template = _templates(render_rayjob(spec, plan_of(spec, "qwen2-7b-length")))["head"]
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v
    ]
    assert sorted(claims) == ["models", "qwen2-7b-length-checkpoints"]
    mounts = {m["mountPath"]: m["name"] for m in _container(template)["volumeMounts"]}
    assert mounts["/models"] == mounts["/data"]


def test_function_reward_configmap_is_mounted(colocated_body: dict[str, Any]) -> None:
    reward = {"type": "function", "function": {"configMapName": "my-reward", "key": "reward.py"}}
    spec = spec_with(colocated_body, lambda s: s.update(reward=reward))
    template = _groups(render_rayjob(spec, plan_of(spec)))["actor"]["template"]
    mounts = {m["mountPath"]: m for m in _container(template)["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes[mounts["/etc/grpo/reward"]["name"]]["configMap"] == {"name": "my-reward"}


def test_env_tells_the_trainer_which_grpojob_to_report_into(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(env=[{"name": "HF_HUB_OFFLINE", "value": "1"}]))
    template = _groups(render_rayjob(spec, plan_of(spec, "qwen2-7b-length")))["actor"]["template"]
    env = {e["name"]: e.get("value") for e in _container(template)["env"]}
    guardrails = json.loads(env.pop("GRPO_GUARDRAILS"))
    assert env == {
        "GRPO_JOB_NAME": "qwen2-7b-length",
        "GRPO_JOB_NAMESPACE": "team-a",
        "GRPO_METRICS_PORT": "9400",
        "HF_HUB_OFFLINE": "1",
    }
    assert guardrails["mode"] == "observe" and "rollback" not in guardrails


def test_scheduling_fields_reach_the_rayjob_and_pods(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        s["scheduling"] = {
            "queueName": "gpu-queue",
            "priorityClassName": "training",
            "suspend": True,
            "activeDeadlineSeconds": 86400,
            "retries": 5,
        }
        s["imagePullSecrets"] = [{"name": "regcred"}]
        s["serviceAccountName"] = "team-sa"
        s["export"] = {"enabled": True, "target": {"claimName": "exports", "path": "out"}}
        s["placement"]["roles"]["actor"]["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]

    spec = spec_with(colocated_body, edit)
    rj = render_rayjob(spec, plan_of(spec))
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    # Every Job of the job is admitted from the same queue: where Kueue manages unlabelled Jobs too, they would
    # otherwise wait for quota meant for nobody.
    for job in (render_preflight_job(spec, plan_of(spec), {}), render_export_job(spec, plan_of(spec))):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert (rj["spec"]["suspend"], rj["spec"]["activeDeadlineSeconds"], rj["spec"]["backoffLimit"]) == (True, 86400, 5)
    pod = _groups(rj)["actor"]["template"]["spec"]
    assert pod["priorityClassName"] == "training"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "team-sa"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_colocated_rayjob_has_only_the_actor_group(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    groups = _groups(render_rayjob(*colocated))
    assert list(groups) == ["actor"]
    assert groups["actor"]["resources"] == {"grpo.dev/actor": "8"}


def test_children_are_ordered_so_the_rayjob_finds_what_its_pods_need(reference: tuple[GRPOJobSpec, Plan]) -> None:
    kinds = [c["kind"] for c in render_children(*reference)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "RayJob"]
    for child in render_children(*reference):
        assert child["metadata"]["namespace"] == "team-a"
        assert child["metadata"]["labels"]["grpo.dev/job"] == "qwen2-7b-reference"


def test_pod_metadata_reaches_every_pod_and_our_labels_win(reference: tuple[GRPOJobSpec, Plan]) -> None:
    spec, _ = reference
    spec = spec.model_copy(update={"pod_metadata": PodMetadata(
        labels={"team": "research", "grpo.dev/job": "spoofed"}, annotations={"sidecar.istio.io/inject": "false"})})
    job_plan = plan_of(spec, "qwen2-7b-reference")
    rayjob = render_rayjob(spec, job_plan)
    templates = [rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
                 *(g["template"] for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"])]
    for template in templates:
        assert template["metadata"]["labels"]["team"] == "research"
        assert template["metadata"]["labels"]["grpo.dev/job"] == "qwen2-7b-reference"
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}


def test_rehearsal_runs_the_same_entrypoint_with_the_rehearsal_flag(reference: tuple[GRPOJobSpec, Plan]) -> None:
    spec, _ = reference
    rehearsal = spec.model_copy(update={"rehearsal": True})
    assert render_rayjob(*reference)["spec"]["entrypoint"] == "grpo-train --config_path /etc/grpo/verl.yaml"
    assert render_rayjob(rehearsal, plan_of(rehearsal))["spec"]["entrypoint"] == (
        "grpo-train --config_path /etc/grpo/verl.yaml --rehearsal")


def test_a_rehearsal_exports_nothing_even_with_export_enabled(reference: tuple[GRPOJobSpec, Plan]) -> None:
    spec, job_plan = reference
    assert spec.export.enabled and job_plan.exports
    assert not plan_of(spec.model_copy(update={"rehearsal": True})).exports


def test_a_failed_rehearsal_is_not_retried_while_training_keeps_its_retries(
        reference: tuple[GRPOJobSpec, Plan]) -> None:
    spec, _ = reference
    assert spec.scheduling.retries > 0
    assert render_rayjob(*reference)["spec"]["backoffLimit"] == spec.scheduling.retries
    rehearsal = spec.model_copy(update={"rehearsal": True})
    assert render_rayjob(rehearsal, plan_of(rehearsal))["spec"]["backoffLimit"] == 0


def test_token_auth_is_on_by_default_through_kuberays_auth_options(colocated: tuple[GRPOJobSpec, Plan]) -> None:
    rj = render_rayjob(*colocated)
    cluster = rj["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    # KubeRay refuses token mode without a rayVersion of 2.52 or later.
    assert cluster["rayVersion"] == "2.52.1"
    # The token itself is KubeRay's (a Secret owned by the RayCluster): nothing of it is in what we render.
    rendered = json.dumps(rj)
    assert "RAY_AUTH_TOKEN" not in rendered and "auth_token" not in rendered


def test_disabled_ray_auth_renders_no_auth_options(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda raw: raw.update(security={"rayAuth": "disabled"}))
    cluster = render_rayjob(spec, plan_of(spec))["spec"]["rayClusterSpec"]
    # Absent, not "disabled": a KubeRay older than v1.5.1 refuses the field, and a disabled job must run there.
    assert "authOptions" not in cluster
    assert cluster["rayVersion"] == "2.52.1"


def test_the_rendered_ray_version_is_the_trainer_images() -> None:
    requirements = Path(__file__).resolve().parents[3] / "images" / "trainer" / "requirements.in"
    assert f"ray[default]=={RAY_VERSION}" in requirements.read_text().split()
