"""The rehearsal's live checks (grpo_trainer.rehearsal.live) on a real local multi-node Ray cluster with
fake GPUs and our role resources, as the job's pods advertise them; and its verdict's pure parts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from grpo_trainer.preflight.verdict import Check, Verdict
from grpo_trainer.rehearsal.live import BundleReport, checkpoint_check, gpu_checks, place_and_probe, placement_check
from grpo_trainer.rehearsal.pools import Pool
from grpo_trainer.rehearsal.run import STATUS_TEXT_LIMIT, build_rehearsal_patch, summary_lines
from ray_nodes import ray_nodes

ROLE_RESOURCES = {"actor": "grpo.dev/actor", "rollout": "grpo.dev/rollout", "reward": "grpo.dev/reward"}


@pytest.fixture(scope="module")
def role_cluster() -> Iterator[Any]:
    """A head without GPUs, an actor node of 2 GPUs and a reward node of 1, like the job's pods."""
    ray = pytest.importorskip("ray")
    nodes = [{"num_cpus": 6, "num_gpus": 2, "resources": {ROLE_RESOURCES["actor"]: 2}},
             {"num_cpus": 3, "num_gpus": 1, "resources": {ROLE_RESOURCES["reward"]: 1}}]
    with ray_nodes({"num_cpus": 1}, nodes) as cluster:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster


def _node_resources(node_id: str) -> dict[str, float]:
    import ray

    return next(n["Resources"] for n in ray.nodes() if n["NodeID"] == node_id)


@pytest.mark.slow
def test_every_bundle_is_probed_on_a_node_of_its_role(role_cluster: Any, tmp_path: Path) -> None:
    pools = [Pool("global_pool", (2,), 3), Pool("reward_pool", (1,), 3)]
    checks, reports = place_and_probe(pools, ROLE_RESOURCES, str(tmp_path), timeout_s=240)
    by_name = {c.name: c for c in checks}
    assert by_name["ray.placement.global_pool"].ok, by_name["ray.placement.global_pool"].message
    assert by_name["ray.placement.reward_pool"].ok
    assert by_name["checkpoints.shared"].ok and "2 actor bundles" in by_name["checkpoints.shared"].message
    # what the probes saw, checked against Ray itself: each bundle's node advertises its role
    assert sorted((r.pool, r.bundle) for r in reports) == [("global_pool", 0), ("global_pool", 1), ("reward_pool", 0)]
    for r in reports:
        assert ROLE_RESOURCES[r.role or ""] in _node_resources(r.node_id)
        assert len(r.gpu_ids) == 1
    # a CPU machine: reported, not failed
    assert by_name["gpus.actor"].ok and "no NVIDIA device" in by_name["gpus.actor"].message
    # the markers and their directory are gone again; the checkpoint directory is left as it was
    assert list(tmp_path.iterdir()) == []
    # and the pools' placement groups are removed: a training run after the rehearsal gets the GPUs
    import ray

    deadline = time.monotonic() + 60  # removing a placement group is asynchronous
    while ray.available_resources().get("GPU") != 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("GPU") == 3


@pytest.mark.slow
def test_a_pool_bigger_than_its_roles_pods_fails_naming_pool_role_and_offer(role_cluster: Any, tmp_path: Path) -> None:
    checks, reports = place_and_probe([Pool("global_pool", (4,), 3)], ROLE_RESOURCES, str(tmp_path), timeout_s=30)
    assert reports == []
    (check,) = checks
    assert not check.ok and check.field == "spec.placement.roles"
    assert "pool global_pool (actor)" in check.message and "GPU=4" in check.message
    assert "grpo.dev/actor=2" in check.message  # what the nodes do offer


def _report(pool: str, role: str | None, host: str, resources: tuple[str, ...], gpus: int = 1, devices: int = 0,
            wrote: str | None = None) -> BundleReport:
    return BundleReport(pool, role, 0, 0, f"id-{host}", host, resources, tuple(str(i) for i in range(gpus)), devices,
                        wrote)


def test_a_bundle_on_a_node_without_its_role_resource_fails_the_pool() -> None:
    pool = Pool("global_pool", (2,), 3)
    reports = [_report("global_pool", "actor", "actor-0", ("grpo.dev/actor",)),
               _report("global_pool", "actor", "rollout-0", ("grpo.dev/rollout",))]
    check = placement_check(pool, reports, ROLE_RESOURCES)
    assert not check.ok and "1 of 2 bundles" in check.message and "rollout-0" in check.message
    assert placement_check(pool, reports[:1], ROLE_RESOURCES).ok


def test_a_pod_seeing_fewer_gpus_than_ray_assigned_fails_its_role() -> None:
    ok = [_report("global_pool", "actor", "a", ("grpo.dev/actor",), gpus=1, devices=8)]
    assert all(c.ok for c in gpu_checks(ok))
    short = [_report("global_pool", "actor", "a", ("grpo.dev/actor",), gpus=2, devices=1)]
    (check,) = gpu_checks(short)
    assert not check.ok and check.name == "gpus.actor" and "fewer NVIDIA devices" in check.message


def test_an_actor_marker_the_driver_cannot_read_means_no_shared_checkpoint_volume(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    seen.write_text("x")
    shared = [_report("global_pool", "actor", "a", (), wrote=str(seen))]
    assert checkpoint_check(str(tmp_path), shared).ok
    elsewhere = [*shared, _report("global_pool", "actor", "b", (), wrote=str(tmp_path / "on-another-disk"))]
    check = checkpoint_check(str(tmp_path), elsewhere)
    assert not check.ok and check.field == "spec.checkpoints.volume" and "['b']" in check.message


def test_the_last_line_is_the_verdict_with_each_failure_named() -> None:
    verdict = Verdict((Check("model.config", "spec.model", True, "ok"),
                       Check("reward.function", "spec.reward.function", False, "raised KeyError", "", "fix it")))
    lines = summary_lines(verdict)
    assert lines[0].startswith("  ok   model.config")
    assert "FAIL reward.function: raised KeyError (fix: fix it)" in lines[1]
    assert lines[-1] == "rehearsal FAILED: spec.reward.function: raised KeyError"
    assert summary_lines(Verdict((Check("a", "", True, "fine"),)))[-1] == "rehearsal PASSED"


def test_status_patch_keeps_each_check_and_shortens_long_texts() -> None:
    long = "x" * 1000
    verdict = Verdict((Check("data.files", "spec.data", False, long, "", long),))
    patch = build_rehearsal_patch(verdict, datetime(2026, 12, 3, 10, 0, tzinfo=UTC))["status"]["rehearsal"]
    assert patch["passed"] is False and patch["finishedAt"] == "2026-12-03T10:00:00Z"
    (check,) = patch["checks"]
    assert check["name"] == "data.files" and check["field"] == "spec.data" and check["ok"] is False
    assert len(check["message"]) == STATUS_TEXT_LIMIT and check["message"].endswith("…")
    assert len(check["fix"]) == STATUS_TEXT_LIMIT
