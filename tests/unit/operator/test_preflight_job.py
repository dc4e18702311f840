"""The preflight Job: CPU only, the pods' own mounts, restricted, and a digest of exactly what it checks."""

from __future__ import annotations

from typing import Any

from grpo_operator.render import render_preflight_job, render_rayjob
from grpo_operator.render.preflight_job import rendered_digest
from grpojob_fixtures import IMAGE, example_body, plan_of, spec_with

GIB = 2**30


def _job(edit: Any = None, gpu_memory: dict[str, int] | None = None, example: str = "reference-disaggregated") -> dict:
    spec = spec_with(example_body(example), edit)
    return render_preflight_job(spec, plan_of(spec), gpu_memory or {})


def _container(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def test_runs_grpo_train_preflight_on_the_rendered_config_with_the_pools_gpu_memory() -> None:
    job = _job(gpu_memory={"rollout": 40 * GIB, "actor": 80 * GIB})
    assert job["metadata"]["name"] == "job-preflight"
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "preflight"
    assert _container(job)["command"] == [
        "grpo-train", "--preflight", "--config_path", "/etc/grpo/verl.yaml",
        "--gpu-memory", f"actor={80 * GIB}", "--gpu-memory", f"rollout={40 * GIB}",
        "--new-checkpoint-claim", str(500 * GIB),  # the example's 500Gi claim, made for the job
    ]
    assert _container(job)["image"] == IMAGE
    assert _container(job)["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 1800


def test_cpu_only_on_the_heads_pool_with_the_trainer_pods_mounts() -> None:
    spec = spec_with(example_body("reference-disaggregated"), lambda s: s["placement"].update(
        head={"nodeSelector": {"grpo.dev/pool": "cpu"}}))
    job = render_preflight_job(spec, plan_of(spec), {})
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"grpo.dev/pool": "cpu"}
    assert _container(job)["resources"]["limits"] == {"cpu": "2", "memory": "8Gi"}
    head = render_rayjob(spec, plan_of(spec))["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    # The head's volumes but the new checkpoint claim: on zonal storage (WaitForFirstConsumer) the first pod that
    # mounts a claim decides its zone, and it must be the actor's; the claim's size is checked instead.
    assert pod["volumes"] == [v for v in head["volumes"] if v["name"] != "checkpoints"]
    mounts = {m["mountPath"]: m["readOnly"] for m in _container(job)["volumeMounts"] if "readOnly" in m}
    assert mounts == {"/etc/grpo/verl.yaml": True, "/models": True, "/data": True}
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"


def test_an_existing_checkpoint_claim_is_mounted_read_write_to_be_probed() -> None:
    job = _job(lambda s: s["checkpoints"].update(volume={"claimName": "team-checkpoints"}))
    mounts = {m["mountPath"]: m["readOnly"] for m in _container(job)["volumeMounts"] if "readOnly" in m}
    # Its writability and free space are checks; it is bound already, so it decides nothing about zones.
    assert mounts["/checkpoints"] is False
    assert "--new-checkpoint-claim" not in _container(job)["command"]


def test_restricted_security_context_as_the_trainer_images_user() -> None:
    job = _job()
    pod = job["spec"]["template"]["spec"]
    # OnRootMismatch: the kubelet does not walk every file of the model and checkpoint volumes at each preflight.
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                      "fsGroupChangePolicy": "OnRootMismatch",
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert _container(job)["securityContext"] == {"allowPrivilegeEscalation": False,
                                                  "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                                                  "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_digest_follows_what_is_checked_and_nothing_else() -> None:
    base = rendered_digest(_job())
    assert base == rendered_digest(_job())
    assert base != rendered_digest(_job(lambda s: s["data"].update(maxResponseLength=2048)))  # verl.yaml
    assert base != rendered_digest(_job(gpu_memory={"actor": 80 * GIB}))  # the command
    assert base != rendered_digest(_job(lambda s: s.update(podMetadata={"annotations": {"a": "b"}})))  # the pod
    assert base == rendered_digest(_job(lambda s: s.update(scheduling={"suspend": True})))


def test_timeout_and_resources_come_from_spec_preflight() -> None:
    job = _job(lambda s: s.update(preflight={"timeoutSeconds": 600, "resources": {"cpu": 4, "memory": "16Gi"}}))
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert _container(job)["resources"]["requests"] == {"cpu": "4", "memory": "16Gi"}
