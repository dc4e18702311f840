"""A job's effective spec under its GRPORuntime: the merge rules of docs/runtimes.md, which runtime a job takes,
and that a job keeps the runtime as it took it."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPORuntimeSpec
from grpo_operator.runtimes import (
    DEFAULT_RUNTIME_REASON,
    MISSING_RUNTIME_REASON,
    RuntimeProblem,
    apply_runtime,
    choose_runtime,
    effective_spec,
    merge_pod_override,
    recorded_monitoring,
    runtime_status,
)
from grpojob_fixtures import example_body, spec_with

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOL_TAINT = {"key": "pool", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}


def runtime(**fields: Any) -> GRPORuntimeSpec:
    return GRPORuntimeSpec.model_validate(fields)


def job(edit: Any = None) -> Any:
    return spec_with(example_body("colocated-length"), edit)


def test_a_runtime_fills_what_the_job_leaves_unset_and_the_jobs_own_scalars_win() -> None:
    rt = runtime(image="registry.example.com/trainer:rt", queueName="gpu-queue", priorityClassName="batch",
                 serviceAccountName="trainer", checkpointStorageClassName="standard-rwo")
    spec, sources = apply_runtime(job(lambda raw: raw.setdefault("scheduling", {}).update(queueName="team-queue")), rt)
    assert spec.image == "registry.example.com/trainer:rt"
    assert spec.scheduling.queue_name == "team-queue"  # the job's
    assert spec.scheduling.priority_class_name == "batch"
    assert spec.service_account_name == "trainer"
    assert spec.checkpoints.volume.storage_class_name == "standard-rwo"
    assert sorted(sources.from_runtime) == ["checkpoints.volume.storageClassName", "image",
                                            "scheduling.priorityClassName", "serviceAccountName"]
    assert sources.overridden == ["scheduling.queueName"]


def test_the_runtimes_storage_class_is_not_given_to_a_job_naming_an_existing_claim() -> None:
    spec, sources = apply_runtime(
        job(lambda raw: raw.setdefault("checkpoints", {}).update(volume={"claimName": "team-checkpoints"})),
        runtime(checkpointStorageClassName="standard-rwo"))
    assert spec.checkpoints.volume.storage_class_name is None
    assert sources.from_runtime == []


def test_env_and_pull_secrets_merge_by_name_with_the_jobs_entry_winning() -> None:
    rt = runtime(env=[{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "NCCL_DEBUG", "value": "WARN"}],
                 imagePullSecrets=[{"name": "registry"}])

    def edit(raw: dict[str, Any]) -> None:
        raw["env"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
        raw["imagePullSecrets"] = [{"name": "team-registry"}, {"name": "registry"}]

    spec, sources = apply_runtime(job(edit), rt)
    assert [(e.name, e.value) for e in spec.env or []] == [("HF_HUB_OFFLINE", "1"), ("NCCL_DEBUG", "INFO")]
    assert [s.name for s in spec.image_pull_secrets or []] == ["team-registry", "registry"]
    assert sorted(sources.merged) == ["env", "imagePullSecrets"]


def test_pod_overrides_merge_role_by_role_lists_by_key_and_tolerations_joined() -> None:
    rt = runtime(pods={
        "actor": {"tolerations": [POOL_TAINT], "resources": {"rdma/ib": 1},
                  "env": [{"name": "A", "value": "rt"}, {"name": "B", "value": "rt"}],
                  "volumes": [{"name": "cache", "mountPath": "/cache", "emptyDir": {}}],
                  "annotations": {"cni": "rt"}, "shmSize": "32Gi"},
        "head": {"labels": {"team": "ml"}},
    })

    def edit(raw: dict[str, Any]) -> None:
        raw["pods"] = {"actor": {"tolerations": [GPU_TAINT], "resources": {"rdma/ib": 2},
                                 "env": [{"name": "B", "value": "job"}], "shmSize": "64Gi",
                                 "volumes": [{"name": "cache", "mountPath": "/big-cache", "emptyDir": {}}]}}

    spec, sources = apply_runtime(job(edit), rt)
    assert spec.pods is not None and spec.pods.actor is not None and spec.pods.head is not None
    actor = spec.pods.actor
    assert [t.key for t in actor.tolerations or []] == ["pool", "nvidia.com/gpu"]
    assert actor.resources == {"rdma/ib": 2}
    assert [(e.name, e.value) for e in actor.env or []] == [("A", "rt"), ("B", "job")]
    assert [v.mount_path for v in actor.volumes or []] == ["/big-cache"]
    assert actor.annotations == {"cni": "rt"}
    assert actor.shm_size == "64Gi"
    assert spec.pods.head.labels == {"team": "ml"}
    assert "pods.head" in sources.from_runtime
    assert {"pods.actor.tolerations", "pods.actor.env", "pods.actor.volumes"} <= set(sources.merged)
    assert "pods.actor.shmSize" in sources.overridden


def test_a_jobs_network_replaces_the_runtimes_whole() -> None:
    rt = runtime(network={"mode": "rdma", "rdma": {"hcas": ["mlx5_0"], "gidIndex": 3}})
    spec, sources = apply_runtime(job(lambda raw: raw.update(network={"mode": "tcp"})), rt)
    assert spec.network is not None and spec.network.mode == "tcp" and spec.network.rdma is None
    assert sources.overridden == ["network"]
    inherited, _ = apply_runtime(job(), rt)
    assert inherited.network is not None and inherited.network.rdma is not None
    assert inherited.network.rdma.gid_index == 3


def test_monitoring_thresholds_merge_field_by_field() -> None:
    rt = runtime(monitoring={"entropyCollapseFraction": 0.2, "klGrowthFactor": 8})
    spec, _ = apply_runtime(job(lambda raw: raw.update(monitoring={"klGrowthFactor": 3})), rt)
    assert (spec.monitoring.entropy_collapse_fraction, spec.monitoring.kl_growth_factor) == (0.2, 3)


def test_an_override_of_only_one_side_is_kept_as_it_is() -> None:
    rt = runtime(pods={"actor": {"capabilities": ["IPC_LOCK"]}})
    assert merge_pod_override(None, rt.pods.actor) is rt.pods.actor  # type: ignore[union-attr]
    assert merge_pod_override(rt.pods.actor, None) is rt.pods.actor  # type: ignore[union-attr]
    assert merge_pod_override(None, None) is None


def _runtime_object(name: str, default: bool = False, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation}, "spec": {"default": default, **spec}}


def test_a_job_takes_the_runtime_it_names_else_the_default_else_none() -> None:
    runtimes = {"gke": _runtime_object("gke", default=True), "eks": _runtime_object("eks")}
    assert choose_runtime("eks", runtimes) is runtimes["eks"]
    assert choose_runtime(None, runtimes) is runtimes["gke"]
    assert choose_runtime(None, {"eks": runtimes["eks"]}) is None


def test_a_missing_runtime_and_two_defaults_are_said_with_the_fix() -> None:
    with pytest.raises(RuntimeProblem) as missing:
        choose_runtime("gke", {})
    assert missing.value.reason == MISSING_RUNTIME_REASON
    assert "spec.runtime" in missing.value.message and "kubectl get grporuntimes" in missing.value.message
    two = {n: _runtime_object(n, default=True) for n in ("a", "b")}
    with pytest.raises(RuntimeProblem) as ambiguous:
        choose_runtime(None, two)
    assert ambiguous.value.reason == DEFAULT_RUNTIME_REASON
    assert "a, b" in ambiguous.value.message
    assert choose_runtime("b", two) is two["b"]  # naming one settles it


def test_a_job_keeps_the_runtime_as_it_took_it_when_the_runtime_changes_later() -> None:
    body = example_body("colocated-length")
    taken = _runtime_object("gke", generation=3, image="registry.example.com/trainer:v1",
                            monitoring={"klGrowthFactor": 6})
    _, sources = apply_runtime(spec_with(body), GRPORuntimeSpec.model_validate(taken["spec"]))
    recorded = {**body, "status": {"runtime": runtime_status(taken, sources)}}
    assert recorded["status"]["runtime"]["generation"] == 3
    assert recorded["status"]["runtime"]["fromRuntime"] == ["image", "monitoring.klGrowthFactor"]
    taken["spec"]["image"] = "registry.example.com/trainer:v2"  # the admin edits the runtime afterwards
    assert effective_spec(recorded).image == "registry.example.com/trainer:v1"
    assert recorded_monitoring(recorded) == {"klGrowthFactor": 6}
    assert effective_spec(body).image is None  # no runtime taken: the job's own spec


def test_a_job_whose_new_claim_is_shared_gets_the_runtimes_shared_storage_class() -> None:
    rt = runtime(checkpointStorageClassName="standard-rwo", sharedCheckpointStorageClassName="filestore")
    single, _ = apply_runtime(job(), rt)
    assert single.checkpoints.volume.storage_class_name == "standard-rwo"

    def two_actor_pods(raw: dict[str, Any]) -> None:
        raw["placement"]["roles"]["actor"]["replicas"] = 2

    shared, sources = apply_runtime(job(two_actor_pods), rt)
    assert shared.checkpoints.volume.storage_class_name == "filestore"
    assert sources.from_runtime == ["checkpoints.volume.storageClassName"]
    asked = job(lambda raw: raw.setdefault("checkpoints", {}).update(volume={"accessModes": ["ReadWriteMany"]}))
    assert apply_runtime(asked, rt)[0].checkpoints.volume.storage_class_name == "filestore"
    without = runtime(checkpointStorageClassName="standard-rwo")
    assert apply_runtime(job(two_actor_pods), without)[0].checkpoints.volume.storage_class_name == "standard-rwo"


def test_only_the_pods_a_job_creates_are_said_to_come_from_the_runtime() -> None:
    rt = runtime(pods={role: {"labels": {"team": "ml"}} for role in ("actor", "rollout", "reward", "converter")})
    _, sources = apply_runtime(job(), rt)  # colocated, a length reward, no export
    assert sources.from_runtime == ["pods.actor"]
