"""The operator as users run it: `helm install`ed from the image built from images/operator/Dockerfile,
a real pod on the real node under the chart's restricted securityContext and read-only root filesystem.

Before this ran, the image crashed at start-up on every cluster (kopf asked getpass.getuser() for its
identity as uid 65532 with no passwd entry; the chart set no POD_ID).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster import node_config
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import prepare_job_namespace

from ..grpojobs import apply_job, example, wait_phase
from ..helm import Release, helm
from ..kube import create_namespace, delete_namespace, get, items, wait_for
from ..prom import prometheus
from ..takeover import burst_job, lease_holder, phases, wrong_children
from .conftest import NodeImages

pytestmark = pytest.mark.e2e

EXAMPLE = "colocated-length"
EXAMPLE_JOB = "qwen2-7b-length"
BURST = 12
LEASE_DURATION_SECONDS = 30  # the chart's default


def release_pods(cluster: LocalCluster, release: Release) -> list[dict]:
    return items(cluster, "pods", "-n", release.namespace, "-l", f"app.kubernetes.io/instance={release.name}")


def the_pod(cluster: LocalCluster, release: Release) -> dict:
    """The leader's pod: the one the Lease names (the chart runs two replicas)."""
    holder = lease_holder(cluster, release.namespace, release.fullname)
    pods = [p for p in release_pods(cluster, release) if p["metadata"]["name"] == holder]
    assert len(pods) == 1, (holder, [p["metadata"]["name"] for p in release_pods(cluster, release)])
    return pods[0]


def http_get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        return response.status, response.read().decode()


# The kubelet's words for a probe that got no answer within timeoutSeconds (Go's HTTP client).
PROBE_TIMEOUT = ("context deadline exceeded", "Client.Timeout exceeded")


def probe_failures_beyond_slowness(events: list[dict], failure_threshold: int) -> list[str]:
    """Liveness failures a working operator would not have: any refused connection or wrong status (a wrong
    port or path), and timeouts as many as the kubelet restarts for. A timeout or two below the threshold is
    what the threshold is there for: on a 2-core CI box a converter pod importing torch beside the operator
    delayed one answer past the probe's 5 s (23:10 on 2026-12-04, with no restart)."""
    # The startup probe is expected to fail until the process serves (it is what holds the others back).
    unhealthy = [e for e in events if e["reason"] == "Unhealthy" and not e["message"].startswith("Startup probe")]
    timeouts = [e for e in unhealthy if any(words in e["message"] for words in PROBE_TIMEOUT)]
    other = [e["message"] for e in unhealthy if e not in timeouts]
    timed_out = sum(e.get("count") or 1 for e in timeouts)
    return other + ([f"{timed_out} probe timeouts"] if timed_out >= failure_threshold else [])


def test_liveness_failures_beyond_slowness_are_named() -> None:
    timeout = {"reason": "Unhealthy", "message": 'Liveness probe failed: Get "http://10.244.0.10:8081/healthz": '
               "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}
    refused = {"reason": "Unhealthy", "message": 'Liveness probe failed: Get "http://10.244.0.10:8081/healthz": '
               "dial tcp 10.244.0.10:8081: connect: connection refused"}
    assert probe_failures_beyond_slowness([timeout], 3) == []
    assert probe_failures_beyond_slowness([{**timeout, "count": 3}], 3) == ["3 probe timeouts"]
    assert probe_failures_beyond_slowness([timeout, refused], 3) == [refused["message"]]
    assert probe_failures_beyond_slowness([{"reason": "Pulled", "message": "pulled"}], 3) == []
    starting = {"reason": "Unhealthy", "message": 'Startup probe failed: Get "http://10.244.0.10:8081/healthz": '
                "dial tcp 10.244.0.10:8081: connect: connection refused"}
    assert probe_failures_beyond_slowness([starting], 3) == []
    not_ready = {"reason": "Unhealthy", "message": 'Readiness probe failed: Get "http://10.244.0.10:8081/readyz": '
                 "dial tcp 10.244.0.10:8081: connect: connection refused"}
    assert probe_failures_beyond_slowness([not_ready], 3) == [not_ready["message"]]


def liveness_successes(cluster: LocalCluster, pod: str) -> float:
    """The kubelet's count of successful liveness probes of `pod` (its /metrics/probes, through the apiserver)."""
    text = cluster.api.text(f"/api/v1/nodes/{node_config.NODE_NAME}/proxy/metrics/probes")
    wanted = ('probe_type="Liveness"', 'result="successful"', f'pod="{pod}"')
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("prober_probe_total{") and all(w in line for w in wanted))


def test_operator_pod_runs_on_the_real_node_from_the_built_image(
        real_node: LocalCluster, operator_pod: Release, node_images: NodeImages) -> None:
    pod = the_pod(real_node, operator_pod)
    status = pod["status"]
    assert pod["spec"]["nodeName"] == node_config.NODE_NAME
    assert status["phase"] == "Running"
    container = status["containerStatuses"][0]
    assert container["ready"] is True
    assert container["image"].endswith(node_images.operator.rsplit("/", 1)[-1])
    spec = pod["spec"]["containers"][0]
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532


def test_helm_tests_trainer_check_pulls_and_starts_the_default_trainer_image(
        real_node: LocalCluster, operator_pod: Release, node_images: NodeImages) -> None:
    """`helm test`'s trainer check on the real node: the chart's default trainer image (the built one here) runs as
    its own user, pulled and started, exit 0. (Only that check: the install check reads the operator's metrics
    through a Service, and the real node has no Service proxy; test_chart.py runs it against a real operator.)"""
    check = f"{operator_pod.fullname}-trainer-check"
    try:
        tested = helm(real_node, "test", operator_pod.name, "-n", operator_pod.namespace, "--timeout", "240s",
                      "--filter", f"name={check}", check=False)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert check in tested.stdout
        (pod,) = items(real_node, "pods", "-n", operator_pod.namespace, "-l",
                       "app.kubernetes.io/component=trainer-check")
        assert pod["spec"]["nodeName"] == node_config.NODE_NAME
        assert pod["spec"]["containers"][0]["image"] == node_images.trainer
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    finally:  # the check's pod carries the release's instance label: gone, so later tests count only operator pods
        real_node.kubectl("delete", "job", check, "-n", operator_pod.namespace, "--ignore-not-found",
                          "--cascade=foreground", "--wait=true", timeout=120)


def test_operator_pod_passes_its_liveness_probe_and_never_restarts(
        real_node: LocalCluster, operator_pod: Release) -> None:
    pod = the_pod(real_node, operator_pod)
    container = pod["spec"]["containers"][0]
    probe = container["livenessProbe"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # Judged once the kubelet has probed it successfully at least twice (its prober counters); a pod that has
    # run that long already is judged at once.
    name = pod["metadata"]["name"]
    wait_for(f"two successful liveness probes of {name}", lambda: liveness_successes(real_node, name) >= 2,
             timeout=probe.get("initialDelaySeconds", 0) + 3 * probe["periodSeconds"] + 60)
    pod = the_pod(real_node, operator_pod)
    status = pod["status"]["containerStatuses"][0]
    if status["restartCount"]:
        previous = real_node.kubectl("logs", "-p", "-n", operator_pod.namespace, pod["metadata"]["name"],
                                     check=False).stdout[-3000:]
        raise AssertionError(f"the operator restarted: {status.get('lastState')}; its log before:\n{previous}")
    events = items(real_node, "events", "-n", operator_pod.namespace,
                   f"--field-selector=involvedObject.name={pod['metadata']['name']}")
    assert not [e["message"] for e in events if e["reason"] in ("BackOff", "Failed")]
    assert not probe_failures_beyond_slowness(events, probe["failureThreshold"])
    # The host reaches the pod through the node's bridge: the same endpoint the kubelet probes.
    code, body = http_get(f"http://{pod['status']['podIP']}:{ports[probe['httpGet']['port']]}/healthz")
    assert code == 200, body


@pytest.fixture(scope="module")
def reconciled_job(real_node: LocalCluster, operator_pod: Release) -> Iterator[tuple[str, list[str]]]:
    """The colocated example reconciled by the operator pod (its Ray pods land on KWOK's fake GPU nodes)."""
    namespace = create_namespace(real_node, "team-pod-operator")
    prepare_job_namespace(real_node, namespace)
    apply_job(real_node, namespace, example(EXAMPLE))
    yield namespace, wait_phase(real_node, namespace, EXAMPLE_JOB, "Succeeded", timeout=180)
    delete_namespace(real_node, namespace, wait_for_jobs=True)


def test_operator_pod_reconciles_a_grpojob_to_succeeded(real_node: LocalCluster, operator_pod: Release,
                                                        reconciled_job: tuple[str, list[str]]) -> None:
    namespace, phases = reconciled_job
    assert phases[-1] == "Succeeded"
    rayjob = get(real_node, "rayjob", EXAMPLE_JOB, "-n", namespace)
    assert rayjob["metadata"]["ownerReferences"][0]["kind"] == "GRPOJob"
    log = real_node.kubectl("logs", "-n", operator_pod.namespace, the_pod(real_node, operator_pod)["metadata"]["name"]
                            ).stdout
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 500):][:4000]


def test_prometheus_scrapes_the_operator_pod(real_node: LocalCluster, operator_pod: Release,
                                              reconciled_job: tuple[str, list[str]], tmp_path: Path) -> None:
    """Real Prometheus scrapes the pod's metrics port over the pod network.

    Debian's Prometheus is built without Kubernetes service discovery, so the test does what a PodMonitor's
    selector does (the release's pod, its port named `metrics`) and hands Prometheus that address.
    """
    pod = the_pod(real_node, operator_pod)
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    target = f"{pod['status']['podIP']}:{ports['metrics']}"
    scrape = [{"job_name": "grpo-operator-pod", "honor_labels": True, "static_configs": [{"targets": [target]}]}]
    with prometheus(tmp_path, scrape) as prom:
        up = wait_for("Prometheus to scrape the operator pod",
                      lambda: [t for t in prom.targets() if t["health"] == "up"], timeout=60)
        namespace, _ = reconciled_job
        phase = wait_for("the job's phase from the pod's metrics", lambda: prom.query(
            f'grpo_operator_job_phase{{namespace="{namespace}",grpojob="{EXAMPLE_JOB}"}} == 1'), timeout=30)
    assert [t["scrapeUrl"] for t in up] == [f"http://{target}/metrics"]
    assert [r["metric"]["phase"] for r in phase] == ["Succeeded"]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_both_replicas_run_and_only_the_lease_holder_reconciles(real_node: LocalCluster,
                                                                 operator_pod: Release) -> None:
    pods = wait_for("both operator pods Ready", lambda: (lambda found: found if len(found) == 2 and all(
        _ready(p) for p in found) else None)(release_pods(real_node, operator_pod)), timeout=120)
    leader = the_pod(real_node, operator_pod)
    for pod in pods:
        code, body = http_get(f"http://{pod['status']['podIP']}:8081/readyz")
        answer = json.loads(body)
        assert (code, answer["leader"]) == (200, leader["metadata"]["name"]), answer
        assert answer["reconciling"] is (pod["metadata"]["name"] == leader["metadata"]["name"]), answer


def test_deleting_the_leader_pod_mid_burst_hands_over_and_every_job_has_exactly_its_children(
        real_node: LocalCluster, operator_pod: Release, record_property: pytest.RecordProperty) -> None:
    """A rollout, a drain or `kubectl delete pod`: the leader stops cleanly and gives the lease up; the other
    replica takes it at its next try and finishes the burst."""
    namespace = prepare_job_namespace(real_node, create_namespace(real_node, "burst-pod-operator"))
    bodies = [burst_job(i) for i in range(BURST)]
    lease = (operator_pod.namespace, operator_pod.fullname)
    try:
        leader = the_pod(real_node, operator_pod)["metadata"]["name"]
        for body in bodies[: BURST // 2]:
            apply_job(real_node, namespace, body)
        wait_for("the leader in the middle of the burst (a RayJob made)",
                 lambda: items(real_node, "rayjobs", "-n", namespace), timeout=120, interval=0.05)
        deleted = time.monotonic()
        real_node.api.delete("pods", leader, operator_pod.namespace)
        for body in bodies[BURST // 2:]:
            apply_job(real_node, namespace, body)
        successor = wait_for("another replica to take the lease", lambda: (
            lambda holder: holder if holder not in ("", leader) else None)(lease_holder(real_node, *lease)),
            timeout=60, interval=0.1)
        takeover = time.monotonic() - deleted
        record_property("takeover_seconds", round(takeover, 2))
        print(f"takeover after deleting the leader pod {leader}: {takeover:.2f} s, by {successor}")
        assert takeover <= LEASE_DURATION_SECONDS, takeover  # given up, not waited out
        wait_for("every job Suspended (its children made, its RayJob waiting)",
                 lambda: set(phases(real_node, namespace).values()) == {"Suspended"}, timeout=180)
        assert wrong_children(real_node, namespace, bodies, network_policy=True) == {}
        log = real_node.kubectl("logs", "-n", operator_pod.namespace, successor).stdout
        assert "Traceback" not in log, log[max(0, log.find("Traceback") - 500):][:4000]
        # The Deployment replaced the deleted pod: a follower again, behind the new leader.
        wait_for("two Ready operator pods again", lambda: len([p for p in release_pods(real_node, operator_pod)
                                                               if _ready(p)]) == 2, timeout=120)
    finally:
        delete_namespace(real_node, namespace, wait_for_jobs=True)
