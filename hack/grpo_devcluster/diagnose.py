"""What a failed test run needs to know about the cluster it ran on, in a few dozen lines.

CI shows only the end of a run's output: a test that timed out says what it waited for, not why the cluster never
got there. `grpo-devcluster diagnose --dir D` prints which components died, the pods that are not where they
should be (with the reason their containers give), the cluster's last warning events, and the ends of the logs of
the components that decide a RayJob's fate (the dashboard stand-in, KubeRay, the real node's CoreDNS, kubelet and
containerd).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from . import processes

# Components whose last lines explain most failures seen so far; any component that died is shown as well.
TELLING_LOGS = ("ray-dashboard-standin", "kuberay-operator", "coredns", "kubelet", "containerd")
SETTLED_PHASES = ("Running", "Succeeded")


def pod_problems(pods: Iterable[dict]) -> list[str]:
    """One line per pod that is neither Running with every container ready nor Succeeded: its phase and the
    reasons its containers (or its scheduling condition) give."""
    lines = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        phase = status.get("phase", "?")
        containers = status.get("containerStatuses") or []
        if phase == "Succeeded" or (phase == "Running" and containers and all(c.get("ready") for c in containers)):
            continue
        reasons = []
        for c in containers:
            for key in ("waiting", "terminated"):
                state = (c.get("state") or {}).get(key)
                if state and state.get("reason"):
                    reasons.append(f"{c['name']}: {state['reason']} {state.get('message', '')[:120]}".strip())
            if c.get("restartCount"):
                reasons.append(f"{c['name']}: {c['restartCount']} restarts")
        for condition in status.get("conditions") or []:
            if condition.get("status") == "False" and condition.get("reason"):
                reasons.append(f"{condition['type']}: {condition['reason']} {condition.get('message', '')[:120]}")
        node = (pod.get("spec") or {}).get("nodeName", "-")
        lines.append(f"{meta['namespace']}/{meta['name']} on {node}: {phase}; " + ("; ".join(reasons) or "no reason"))
    return lines


def warning_events(events: Iterable[dict], last: int = 12) -> list[str]:
    """The newest `last` Warning events, oldest first, one line each."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    warnings.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [f"{e.get('lastTimestamp') or e.get('eventTime')} {e['involvedObject'].get('kind')} "
            f"{e['metadata']['namespace']}/{e['involvedObject'].get('name')}: {e.get('reason')} "
            f"{(e.get('message') or '')[:160]} (x{e.get('count', 1)})" for e in warnings[-last:]]


def diagnosis(running: dict[str, bool], log_dir: Path, pods: list[dict] | None, events: list[dict] | None,
              log_lines: int = 8) -> list[str]:
    """The report, as lines. `pods`/`events` are None when the API server did not answer."""
    out = ["components: " + ", ".join(f"{n}={'up' if up else 'DEAD'}" for n, up in sorted(running.items()))]
    if pods is None:
        out.append("pods: the API server did not answer")
    else:
        problems = pod_problems(pods)
        out.append(f"pods: {len(pods)}, of which not Running-and-ready nor Succeeded: {len(problems)}")
        out += [f"  {line}" for line in problems[:25]]
    if events is not None:
        out.append("last warning events:")
        out += [f"  {line}" for line in warning_events(events)]
    dead = [n for n, up in running.items() if not up]
    for name in [*dict.fromkeys([*dead, *TELLING_LOGS])]:
        log = log_dir / f"{name}.log"
        if log.exists():
            out.append(f"last lines of {log}:")
            out += [f"  {line[:300]}" for line in processes.log_tail(log, log_lines).splitlines()]
    return out
