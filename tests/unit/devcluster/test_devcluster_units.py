"""Pure parts of the local control plane: stages, nodes, the dashboard stand-in, build errors."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import ipaddress
import shutil
import socket
import struct
import threading
from pathlib import Path

import pytest
from grpo_devcluster import build, kwok_config
from grpo_devcluster.components import KUBERNETES, Component
from grpo_devcluster.dashboard_standin import (
    ClusterDns,
    DnsUnavailable,
    Outcome,
    StandinState,
    job_info,
    namespace_of,
    rayjob_of,
)
from grpo_devcluster.errors import DevClusterError


def test_kwok_stages_cover_node_pod_job_and_volume_lifecycles() -> None:
    names = [s["metadata"]["name"] for s in kwok_config.stages()]
    assert names == ["node-initialize", "node-heartbeat", "pod-ready", "pod-fail", "pod-complete",
                     "pod-complete-submitter", "preflight-fail", "preflight-pass-verdict", "preflight-pass",
                     "pod-crash-loop", "pod-delete",
                     "pvc-provision"]


def test_job_pods_complete_only_without_the_fail_annotation() -> None:
    by_name = {s["metadata"]["name"]: s for s in kwok_config.stages()}
    complete = by_name["pod-complete"]["spec"]["selector"]["matchExpressions"]
    fail = by_name["pod-fail"]["spec"]["selector"]["matchExpressions"]
    key = f'.metadata.annotations["{kwok_config.FAIL_POD_ANNOTATION}"]'
    assert {"key": key, "operator": "DoesNotExist"} in complete
    assert {"key": key, "operator": "Exists"} in fail
    # KubeRay's submitter carries the job's podMetadata too; it completes, so the converter can be failed.
    component = '.metadata.labels["app.kubernetes.io/component"]'
    assert {"key": component, "operator": "NotIn", "values": ["submitter"]} in fail
    submitter = by_name["pod-complete-submitter"]["spec"]["selector"]["matchExpressions"]
    assert {"key": key, "operator": "Exists"} in submitter
    assert {"key": component, "operator": "In", "values": ["submitter"]} in submitter


def test_job_pods_with_the_keep_running_annotation_never_complete_but_preflight_pods_do() -> None:
    by_name = {s["metadata"]["name"]: s for s in kwok_config.stages()}
    absent = {"key": f'.metadata.annotations["{kwok_config.KEEP_RUNNING_ANNOTATION}"]', "operator": "DoesNotExist"}
    for stage in ("pod-complete", "pod-complete-submitter"):
        assert absent in by_name[stage]["spec"]["selector"]["matchExpressions"]
    for stage in ("preflight-pass", "preflight-fail", "pod-ready"):
        assert absent not in by_name[stage]["spec"]["selector"]["matchExpressions"]


def test_preflight_pods_end_with_a_verdict_and_other_job_pods_never_do() -> None:
    import json

    by_name = {s["metadata"]["name"]: s for s in kwok_config.stages()}
    component = '.metadata.labels["app.kubernetes.io/component"]'
    verdict = kwok_config._VERDICT_QUERY
    assert kwok_config.PREFLIGHT_VERDICT_ENV in verdict
    for stage in ("pod-fail", "pod-complete"):
        expressions = by_name[stage]["spec"]["selector"]["matchExpressions"]
        assert {"key": component, "operator": "NotIn", "values": ["preflight"]} in expressions
    passing = by_name["preflight-pass"]["spec"]
    assert {"key": verdict, "operator": "DoesNotExist"} in passing["selector"]["matchExpressions"]
    assert {"key": verdict, "operator": "Exists"} in by_name["preflight-fail"]["spec"]["selector"]["matchExpressions"]
    simulated = json.loads(kwok_config.SIMULATED_VERDICT)
    assert simulated["passed"] is True and "simulated" in simulated["checks"][0]["message"]
    assert f"message: '{kwok_config.SIMULATED_VERDICT}'" in passing["next"]["statusTemplate"]


def test_fake_nodes_look_like_a100_servers_in_pools() -> None:
    nodes = kwok_config.node_manifests((kwok_config.NodePool("train", 3), kwok_config.NodePool("rollout", 1)))
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-train-0", "gpu-train-1", "gpu-train-2", "gpu-rollout-0"]
    node = nodes[0]
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node["metadata"]["annotations"][kwok_config.FAKE_NODE_ANNOTATION] == "fake"
    assert "taints" not in node["spec"]


def test_standin_reports_running_then_the_chosen_outcome() -> None:
    state = StandinState(default=Outcome("SUCCEEDED", "ok", after_seconds=10))
    state.outcomes[("team-a", "qwen")] = Outcome("FAILED", "OOM in actor", after_seconds=5)
    assert job_info(state, "team-a", "qwen-ab12c", now=100.0)["status"] == "RUNNING"
    failed = job_info(state, "team-a", "qwen-ab12c", now=106.0)
    assert (failed["status"], failed["message"]) == ("FAILED", "OOM in actor")
    assert failed["end_time"] == 105_000
    # Same RayJob name in another namespace follows the default.
    assert job_info(state, "team-b", "qwen-zz999", now=100.0)["status"] == "RUNNING"
    assert job_info(state, "team-b", "qwen-zz999", now=111.0)["status"] == "SUCCEEDED"


def test_standin_parses_kuberay_hosts_and_job_ids() -> None:
    assert namespace_of("train-abc-head-svc.team-a.svc.cluster.local:8265") == "team-a"
    assert namespace_of("127.0.0.1:18265") == ""
    assert rayjob_of("qwen2-7b-length-x7k2p") == "qwen2-7b-length"


def test_cache_key_changes_with_the_toolchain() -> None:
    assert KUBERNETES.cache_key("go1.26.8") != KUBERNETES.cache_key("go1.26.9")
    assert KUBERNETES.cache_key("go1.26.8") == KUBERNETES.cache_key("go1.26.8")


def test_missing_go_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(DevClusterError) as error:
        build.go_version()
    assert error.value.component == "go toolchain"
    assert "not on PATH" in str(error.value)


def _go_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, main: str) -> Component:
    """A one-file Go module example.com/NAME under tmp_path, as a component built into a cache of its own."""
    module = tmp_path / "modules" / name
    module.mkdir(parents=True)
    (module / "go.mod").write_text(f"module example.com/{name}\n\ngo 1.24\n")
    (module / "go.sum").write_text("")
    (module / "main.go").write_text(f"package main\n\n{main}\n")
    monkeypatch.setenv("GRPO_DEVCLUSTER_CACHE", str(tmp_path / "cache"))
    return Component(name, {name: f"example.com/{name}"}, modules_dir=tmp_path / "modules")


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")
def test_failed_build_names_the_component_and_leaves_no_partial_output(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _go_component(tmp_path, monkeypatch, "broken", "func main() { undefined() }")
    with pytest.raises(DevClusterError) as error:
        build.build_component(broken, build.go_version())
    assert error.value.component == "broken"
    assert "undefined" in str(error.value)
    assert not list((tmp_path / "cache").glob("broken-*"))


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")
def test_two_builders_of_one_component_build_it_once_and_both_get_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """hack/test's background build and a demo (or a benchmark) started beside it: the second waits for the first
    instead of deleting its staging directory under its `go build`."""
    hello = _go_component(tmp_path, monkeypatch, "hello", "func main() {}")
    go = build.go_version()
    logs = [io.StringIO(), io.StringIO()]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda log: build.build_component(hello, go, log=log), logs))
    assert built[0] == built[1] and (built[0] / "bin" / "hello").is_file()
    assert sum(log.getvalue().count("[devcluster] built hello") for log in logs) == 1


def test_the_base_python_prefix_is_the_real_path_its_scripts_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    # pip's shebang names the interpreter's real path; a prefix reached through a link (a linked
    # ~/.pyenv) would be relocated nowhere and leave pip unrunnable in the image.
    from grpo_devcluster import images

    real = tmp_path / "pythons" / "3.12.1"
    (real / "bin").mkdir(parents=True)
    (real / "lib").mkdir()
    (real / "bin" / "python3.12").write_text("")
    (real / "lib" / "libpython3.12.so.1.0").write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "pythons")
    monkeypatch.setenv("GRPO_BASE_PYTHON_PREFIX", str(tmp_path / "linked" / "3.12.1"))
    assert images.find_python312() == real.resolve()


def _dns_server(answer: str | None) -> tuple[socket.socket, threading.Thread]:
    """A loopback DNS server: answers one A record (`answer`), or never replies (None)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                query, peer = sock.recvfrom(512)
                if answer is None:
                    continue
                qid = struct.unpack(">H", query[:2])[0]
                question = query[12:]
                record = struct.pack(">HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton(answer)
                sock.sendto(struct.pack(">HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + record, peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return sock, thread


def test_cluster_dns_that_does_not_answer_is_not_taken_for_a_simulated_cluster() -> None:
    sock, _ = _dns_server(None)
    with sock:
        dns = ClusterDns("127.0.0.1", ipaddress.IPv4Network("10.244.0.0/24"), port=sock.getsockname()[1], attempts=1)
        with pytest.raises(DnsUnavailable):
            dns.real_pod("head-svc.ns.svc.cluster.local:8265")
        assert dns.cache == {}  # asked again next time


def test_cluster_dns_answers_a_real_pod_or_a_simulated_one() -> None:
    for answer, expected in (("10.244.0.7", "10.244.0.7"), ("127.0.0.9", None)):
        sock, _ = _dns_server(answer)
        with sock:
            dns = ClusterDns("127.0.0.1", ipaddress.IPv4Network("10.244.0.0/24"), port=sock.getsockname()[1])
            assert dns.real_pod("head-svc.ns.svc.cluster.local:8265") == expected
