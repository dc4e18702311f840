"""`grpo-devcluster diagnose`: what a failed run prints about its cluster."""

from __future__ import annotations

from pathlib import Path

from grpo_devcluster.diagnose import diagnosis, pod_problems, warning_events


def _pod(name: str, phase: str, ready: bool | None = None, waiting: str | None = None, restarts: int = 0,
         unschedulable: str | None = None) -> dict:
    status: dict = {"phase": phase}
    if ready is not None or waiting:
        state = {"waiting": {"reason": waiting, "message": "back-off pulling"}} if waiting else {"running": {}}
        status["containerStatuses"] = [{"name": "main", "ready": bool(ready), "restartCount": restarts,
                                        "state": state}]
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unschedulable}]
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {"nodeName": "grpo-node"}, "status": status}


def test_settled_pods_are_left_out_and_the_others_say_why() -> None:
    pods = [_pod("done", "Succeeded"), _pod("serving", "Running", ready=True),
            _pod("pulling", "Pending", waiting="ImagePullBackOff"),
            _pod("flapping", "Running", ready=False, restarts=3),
            _pod("homeless", "Pending", unschedulable="0/3 nodes have enough nvidia.com/gpu")]
    lines = pod_problems(pods)
    assert [line.split(" ", 1)[0] for line in lines] == ["ns/pulling", "ns/flapping", "ns/homeless"]
    assert "main: ImagePullBackOff back-off pulling" in lines[0]
    assert "main: 3 restarts" in lines[1]
    assert "PodScheduled: Unschedulable 0/3 nodes have enough nvidia.com/gpu" in lines[2]


def test_only_the_newest_warnings_are_shown_oldest_first() -> None:
    def event(kind: str, at: str, reason: str) -> dict:
        return {"type": kind, "lastTimestamp": at, "reason": reason, "message": "m",
                "metadata": {"namespace": "ns"}, "involvedObject": {"kind": "Pod", "name": "p"}}
    events = [event("Warning", "2026-12-05T08:00:03Z", "third"), event("Normal", "2026-12-05T08:00:04Z", "normal"),
              event("Warning", "2026-12-05T08:00:01Z", "first"), event("Warning", "2026-12-05T08:00:02Z", "second")]
    assert [line.split()[3] for line in warning_events(events, last=2)] == ["second", "third"]


def test_dead_components_logs_come_first_and_a_silent_api_server_is_said(tmp_path: Path) -> None:
    (tmp_path / "etcd.log").write_text("panic: disk full\n")
    (tmp_path / "kubelet.log").write_text("\n".join(f"line {i}" for i in range(20)))
    lines = diagnosis({"etcd": False, "kubelet": True}, tmp_path, None, None, log_lines=3)
    assert lines[0] == "components: etcd=DEAD, kubelet=up"
    assert "pods: the API server did not answer" in lines
    logs = [line for line in lines if line.startswith("last lines of")]
    assert [Path(line.split()[-1].rstrip(":")).name for line in logs] == ["etcd.log", "kubelet.log"]
    assert lines[-3:] == ["  line 17", "  line 18", "  line 19"]
