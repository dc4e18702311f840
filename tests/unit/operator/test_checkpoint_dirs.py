"""Per-job checkpoint directories and explicit warm starts (checkpoints.resumeFrom)."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.plan import PlanError, ResumeSource
from grpo_operator.reconcile.children import missing_dependencies
from grpo_operator.render import render_export_job, render_rayjob, verl_config
from grpojob_fixtures import plan_of, spec_with


def _mounts(template: dict[str, Any]) -> dict[str, tuple[str, str | None, bool]]:
    """mountPath -> (claim, subPath, readOnly) for the claims a pod template mounts."""
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in template["spec"]["volumes"] if "persistentVolumeClaim" in v}
    return {m["mountPath"]: (claims[m["name"]], m.get("subPath"), m["readOnly"])
            for m in template["spec"]["containers"][0]["volumeMounts"] if m["name"] in claims}


def _shared_claim(s: dict[str, Any]) -> None:
    s["checkpoints"] = {"volume": {"claimName": "team-ckpt"}}


def test_two_jobs_on_one_claim_write_separate_directories(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, _shared_claim)
    dirs = set()
    for name in ("job-a", "job-b"):
        head = render_rayjob(spec, plan_of(spec, name))["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
        claim, sub_path, read_only = _mounts(head)["/checkpoints"]
        assert (claim, read_only) == ("team-ckpt", False)
        dirs.add(sub_path)
    assert dirs == {"team-a/job-a", "team-a/job-b"}


def test_export_reads_only_this_jobs_directory(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body, _shared_claim)
    job = render_export_job(spec, plan_of(spec, "qwen2-7b-reference"))
    template = job["spec"]["template"]
    assert _mounts(template)["/checkpoints"] == ("team-ckpt", "team-a/qwen2-7b-reference", True)
    command = template["spec"]["containers"][0]["command"]
    assert command[command.index("--checkpoint") + 1] == "/checkpoints"  # the latest of this job, not the claim's


@pytest.mark.parametrize(("resume_from", "source"), [
    ({"jobName": "warmup"}, ResumeSource("team-ckpt", "team-a/warmup", None)),
    ({"jobName": "warmup", "claimName": "warmup-checkpoints", "step": 200},
     ResumeSource("warmup-checkpoints", "team-a/warmup", 200)),
    ({"path": "imported/sft-run/", "claimName": "models"}, ResumeSource("models", "imported/sft-run", None)),
])
def test_resume_from_names_a_directory_of_a_claim(colocated_body: dict[str, Any], resume_from: dict[str, Any],
                                                  source: ResumeSource) -> None:
    def edit(s: dict[str, Any]) -> None:
        _shared_claim(s)
        s["checkpoints"]["resumeFrom"] = resume_from

    assert plan_of(spec_with(colocated_body, edit), "next").resume_from == source


def test_resume_source_is_mounted_read_only_where_checkpoints_are_written(colocated_body: dict[str, Any]) -> None:
    def edit(s: dict[str, Any]) -> None:
        _shared_claim(s)
        s["checkpoints"]["resumeFrom"] = {"jobName": "warmup", "step": 200}

    spec = spec_with(colocated_body, edit)
    job_plan = plan_of(spec, "next")
    cluster = render_rayjob(spec, job_plan)["spec"]["rayClusterSpec"]
    for template in (cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]):
        mounts = _mounts(template)
        assert mounts["/resume-from"] == ("team-ckpt", "team-a/warmup", True)
        assert mounts["/checkpoints"] == ("team-ckpt", "team-a/next", False)
        # One volume for the claim, mounted twice at different directories.
        assert [v["name"] for v in template["spec"]["volumes"]].count("checkpoints") == 1
    assert verl_config(spec, job_plan)["grpo"]["checkpoints"] == {"resumeFrom": {"dir": "/resume-from", "step": 200}}


def test_no_warm_start_renders_no_resume_source(colocated: Any) -> None:
    spec, job_plan = colocated
    assert "checkpoints" not in verl_config(spec, job_plan)["grpo"]
    head = render_rayjob(spec, job_plan)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert "/resume-from" not in _mounts(head)


def test_resume_from_the_jobs_own_new_pvc_is_refused(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(checkpoints={"resumeFrom": {"jobName": "warmup"}}))
    with pytest.raises(PlanError) as refused:
        plan_of(spec, "next")
    assert refused.value.field == "checkpoints.resumeFrom.claimName"
    assert "warmup-checkpoints" not in refused.value.message and "<jobName>-checkpoints" in refused.value.message


def test_a_missing_resume_claim_is_waited_for(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body, lambda s: s.update(
        checkpoints={"resumeFrom": {"jobName": "warmup", "claimName": "warmup-checkpoints"}}))
    problems = missing_dependencies(spec, plan_of(spec, "next"), {"models", "datasets"}, {})
    assert [(field, reason) for field, reason, _ in problems] == [
        ("checkpoints.resumeFrom.claimName", "MissingPersistentVolumeClaim")]
