"""The converter Job <job>-export."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import Plan
from grpo_operator.render import render_export_job
from grpojob_fixtures import plan_of, spec_with


def test_export_job_converts_the_step_into_the_target(reference: tuple[GRPOJobSpec, Plan]) -> None:
    job = render_export_job(*reference, step=500)
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch/v1", "Job", "qwen2-7b-reference-export")
    assert job["spec"]["backoffLimit"] in (0, 1)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    cmd = container["command"]
    assert cmd[:5] == [
        "grpo-export",
        "--checkpoint",
        "/checkpoints/global_step_500",
        "--target",
        "/export/qwen2-7b-grpo",
    ]
    assert cmd[cmd.index("--max-shard-size") + 1] == "5GB"
    assert cmd[cmd.index("--dtype") + 1] == "bf16"
    assert "--verify" in cmd
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_export_job_mounts_checkpoints_read_only_and_target_read_write(reference: tuple[GRPOJobSpec, Plan]) -> None:
    pod = render_export_job(*reference)["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
    assert mounts["/checkpoints"]["readOnly"] is True
    assert mounts["/export"]["readOnly"] is False
    assert volumes[mounts["/checkpoints"]["name"]] == "qwen2-7b-reference-checkpoints"
    assert volumes[mounts["/export"]["name"]] == "exports"


def test_export_without_step_converts_the_latest_checkpoint(reference: tuple[GRPOJobSpec, Plan]) -> None:
    cmd = render_export_job(*reference)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--checkpoint") + 1] == "/checkpoints"


def test_export_job_needs_a_target(colocated_body: dict[str, Any]) -> None:
    spec = spec_with(colocated_body)
    with pytest.raises(ValueError, match=r"export\.target"):
        render_export_job(spec, plan_of(spec))


def test_converter_runs_where_the_head_runs_unless_export_places_it(reference_body: dict[str, Any]) -> None:
    spec = spec_with(reference_body)
    default = render_export_job(spec, plan_of(spec))["spec"]["template"]["spec"]
    assert default.get("nodeSelector", {}) == dict(spec.placement.head.node_selector)

    def place(raw: dict[str, Any]) -> None:
        raw["export"] |= {"nodeSelector": {"pool": "cpu"}, "resources": {"cpu": "2", "memory": "16Gi"},
                          "tolerations": [{"key": "cpu-only", "operator": "Exists"}]}

    placed_spec = spec_with(reference_body, place)
    placed = render_export_job(placed_spec, plan_of(placed_spec))["spec"]["template"]["spec"]
    assert placed["nodeSelector"] == {"pool": "cpu"}
    assert placed["tolerations"] == [{"key": "cpu-only", "operator": "Exists"}]
    assert placed["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "16Gi"},
                                                    "limits": {"cpu": "2", "memory": "16Gi"}}
