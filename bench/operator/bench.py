"""Operator at scale: N GRPOJobs created at once on a KWOK cluster of fake 8x A100 nodes.

For each N (a fresh control plane each time, so one burst's garbage never slows the next) it
measures, per job, from watch events received by this process:

  ours     GRPOJob ADDED -> RayJob ADDED       (our operator's step)
  kuberay  RayJob ADDED  -> RayCluster ADDED   (KubeRay's step in the same run: the baseline)
  bound    GRPOJob ADDED -> last pod of the job bound to a node by kube-scheduler

and for the operator process: peak RSS (VmHWM), CPU seconds during the burst, and the API requests
it made per job, counted from the kube-apiserver audit log by user agent (kopf's aiohttp client
says `kopf/<version>`, the handlers' own `grpo-operator/<version>`, and commits before the handlers'
aiohttp client the kubernetes client's `OpenAPI-Generator/...`); this script's own client is
renamed so it is not counted). Finally, with `--rss-jobs`, RSS with that many (suspended)
GRPOJobs present.

  .venv/bin/python bench/operator/bench.py --nodes 250 --jobs 50 200 500 --rss-jobs 1000

Not a test: it prints a table and ratios; see RESULTS.md for recorded runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from grpo_devcluster.cluster import LocalCluster, Ports
from grpo_devcluster.kwok_config import KEEP_RUNNING_ANNOTATION, NodePool
from grpo_devcluster.operator_runner import OperatorProcess, install_crd
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "colocated-length.yaml"
BENCH_AGENT = "grpo-bench"
OPERATOR_AGENTS = ("kopf/", "grpo-operator/", "OpenAPI-Generator/")
API: client.ApiClient  # set by configure_client

AUDIT_BUFFER_EVENTS = 200_000
AUDIT_LOG_MB = 1_000_000
# Everything at Metadata level (user agent, verb, resource) except the node heartbeats and leases
# KWOK and the controllers write all the time, which would only grow the log.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "resources": [{"group": "", "resources": ["nodes", "nodes/status"]}]},
        {"level": "Metadata"},
    ],
}


# --------------------------------------------------------------------------- pure helpers


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def job_manifest(name: str, gpus: int, suspend: bool = False, preflight: bool = False) -> dict:
    """The colocated length example on `gpus` GPUs of one node (4: two jobs share a server).

    Without the preflight by default: with it, "ours" also holds the preflight pod's life (scheduling,
    KWOK's simulated run), which earlier rounds' figures do not; `--preflight` measures that path."""
    body = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    body["metadata"] = {"name": name}
    body["spec"]["placement"]["roles"]["actor"]["gpus"] = gpus
    body["spec"]["preflight"] = {"enabled": preflight}
    # Training runs on (as a GRPO run does for hours): the count covers each job's creation up to Running at
    # every N, not simulated ends and KubeRay's retries of them (kwok_config.KEEP_RUNNING_ANNOTATION).
    body["spec"]["podMetadata"] = {"annotations": {KEEP_RUNNING_ANNOTATION: "true"}}
    if suspend:
        body["spec"]["scheduling"] = {**body["spec"].get("scheduling", {}), "suspend": True}
    return body


def operator_requests(audit_lines: Iterable[str], namespace: str) -> dict[tuple[str, str, str], int]:
    """Requests the operator made that touch `namespace` (or are cluster-wide watches/lists), by
    (who, verb, resource): who is the handlers' call site (`grpo-operator/<v> (<site>)`), or `kopf` (its
    watches, progress patches and Events), or the agent's name for other clients."""
    counts: dict[tuple[str, str, str], int] = {}
    for line in audit_lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        agent = event.get("userAgent", "")
        if not agent.startswith(OPERATOR_AGENTS):
            continue
        ref = event.get("objectRef") or {}
        if ref.get("namespace") not in (None, namespace):
            continue
        resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (who_asked(agent), event.get("verb", "?"), resource)
        counts[key] = counts.get(key, 0) + 1
    return counts


def who_asked(agent: str) -> str:
    """`grpo-operator/0.9 (mirror-rayjob)` -> `mirror-rayjob`; `kopf/1.38 ...` -> `kopf`."""
    if agent.startswith("grpo-operator/") and agent.endswith(")") and " (" in agent:
        return agent.rsplit(" (", 1)[1][:-1]
    return agent.split("/", 1)[0]


def audit_errors(metrics_text: str) -> int:
    """Audit events the apiserver failed to write, from its /metrics: `apiserver_audit_error_total`, summed over
    plugins. A full batch buffer drops events (\"audit buffer queue blocked\") and says so only there and in its own
    log, so a request count read from the audit log is short by at least this many."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("apiserver_audit_error_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def by_verb(requests: dict[tuple[str, str, str], int]) -> dict[str, int]:
    verbs: dict[str, int] = {}
    for (_, verb, _), count in requests.items():
        verbs[verb] = verbs.get(verb, 0) + count
    return verbs


def describe_counts(counts: dict[str, int], per: int) -> str:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{key} {count / per:.2f}" if per > 1 else f"{key} {count}" for key, count in ranked) or "none"


def per_call_site(requests: dict[tuple[str, str, str], int], jobs: int) -> list[str]:
    """One line per (who, verb, resource), most requests first, per job."""
    ranked = sorted(requests.items(), key=lambda item: (-item[1], item[0]))
    return [f"    {who:<18} {verb:<7} {resource:<28} {count / jobs:6.2f}" for (who, verb, resource), count in ranked]


def vm_hwm_bytes(pid: int) -> int:
    """Peak resident set size of `pid` as the kernel counted it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# --------------------------------------------------------------------------- watching


@dataclass
class Seen:
    """Monotonic times at which this process first saw each object, keyed by job name."""

    grpojob: dict[str, float] = field(default_factory=dict)
    rayjob: dict[str, float] = field(default_factory=dict)
    raycluster: dict[str, float] = field(default_factory=dict)
    pod_bound: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> pod -> time
    pods_expected: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _watch(stop: threading.Event, list_fn, args: tuple, on_event) -> None:
    """Watch until `stop`; re-watch on expiry. Times are taken when an event arrives here."""
    while not stop.is_set():
        w = watch.Watch()
        try:
            for event in w.stream(list_fn, *args, timeout_seconds=5):
                on_event(time.monotonic(), event["type"], event["object"])
                if stop.is_set():
                    break
        except Exception as exc:  # a benchmark watcher must outlive one failed watch
            print(f"  watch error ({exc.__class__.__name__}: {exc}); re-watching", file=sys.stderr)
            time.sleep(0.2)
        finally:
            w.stop()


def start_watchers(namespace: str, seen: Seen, stop: threading.Event) -> None:
    custom, core = client.CustomObjectsApi(API), client.CoreV1Api(API)

    def first(table: dict[str, float], key: str | None, at: float) -> None:
        if key:
            with seen.lock:
                table.setdefault(key, at)

    def on_grpojob(at: float, _type: str, obj: dict) -> None:
        first(seen.grpojob, obj["metadata"]["name"], at)

    def on_rayjob(at: float, _type: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        first(seen.rayjob, name, at)
        groups = obj["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []
        with seen.lock:
            seen.pods_expected[name] = 1 + sum(g.get("replicas", 1) for g in groups)

    def on_raycluster(at: float, _type: str, obj: dict) -> None:
        first(seen.raycluster, (obj["metadata"].get("labels") or {}).get("grpo.dev/job"), at)

    def on_pod(at: float, _type: str, pod) -> None:
        job = (pod.metadata.labels or {}).get("grpo.dev/job")
        if job and pod.spec.node_name:
            with seen.lock:
                seen.pod_bound.setdefault(job, {}).setdefault(pod.metadata.name, at)

    targets = [
        (custom.list_namespaced_custom_object, ("grpo.dev", "v1alpha1", namespace, "grpojobs"), on_grpojob),
        (custom.list_namespaced_custom_object, ("ray.io", "v1", namespace, "rayjobs"), on_rayjob),
        (custom.list_namespaced_custom_object, ("ray.io", "v1", namespace, "rayclusters"), on_raycluster),
        (core.list_namespaced_pod, (namespace,), on_pod),
    ]
    for list_fn, args, handler in targets:
        threading.Thread(target=_watch, args=(stop, list_fn, args, handler), daemon=True).start()


# --------------------------------------------------------------------------- one burst


@dataclass
class BurstResult:
    jobs: int
    ours: list[float]
    kuberay: list[float]
    bound: list[float]
    missing: dict[str, int]
    cpu_seconds: float
    peak_rss: int
    requests: dict[tuple[str, str, str], int]  # (who, verb, resource) -> count
    load: tuple[float, float, float]
    wall: float
    created_over: float  # first to last GRPOJob ADDED: how fast the apiserver took the burst in
    samples: dict[str, dict[str, float]]  # job -> stage -> monotonic time (CLOCK_MONOTONIC, system-wide)
    # How far the jobs went (each phase is a status write) and the operator's Events on them: what the requests
    # per job bought, since a longer burst carries jobs further through their lives.
    phases: dict[str, int] = field(default_factory=dict)
    event_reasons: dict[str, int] = field(default_factory=dict)
    # The operator's RSS each second of the burst (monotonic time, bytes): where the peak falls.
    rss_timeline: list[tuple[float, int]] = field(default_factory=list)
    # The operator's CPU seconds so far, each second (monotonic time, seconds): what the creation burst cost apart
    # from keeping the jobs afterwards, which grows with however long the simulated cluster takes to bind them all.
    cpu_timeline: list[tuple[float, float]] = field(default_factory=list)
    # The operator's CPU seconds per second just after the count, its jobs still there: what it costs to keep them
    # (leases, timers), plus whatever KubeRay still sends about clusters it has not finished starting.
    idle_cpu_rate: float = float("nan")
    # Audit events the apiserver dropped during the burst: requests it did not count (0 for a trustworthy count).
    audit_dropped: int = 0


def create_all(namespace: str, bodies: list[dict], workers: int = 16) -> None:
    custom = client.CustomObjectsApi(API)

    def create(body: dict) -> None:
        try:
            custom.create_namespaced_custom_object("grpo.dev", "v1alpha1", namespace, "grpojobs", body)
        except ApiException as exc:
            if exc.status != 409:  # a retried create that had gone through
                raise

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, bodies))


def prepare_namespace(cluster: LocalCluster, namespace: str) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for claim in ("models", "datasets"):
        cluster.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": claim, "namespace": namespace},
                       "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}}}})
    deadline = time.monotonic() + 60
    while cluster.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default ServiceAccount in {namespace}")
        time.sleep(0.3)


def run_burst(cluster: LocalCluster, operator: OperatorProcess | FloorProcess, audit_log: Path, jobs: int, gpus: int,
              timeout: float, settle: float, preflight: bool = False) -> BurstResult:
    namespace = f"bench-{jobs}"
    prepare_namespace(cluster, namespace)
    seen, stop = Seen(), threading.Event()
    start_watchers(namespace, seen, stop)
    time.sleep(1.0)  # the watches are open before the first create
    names = [f"job-{i:04d}" for i in range(jobs)]
    pid = operator.proc.pid
    audit_offset = audit_log.stat().st_size
    dropped_before = audit_errors(apiserver_metrics())
    cpu_before, load = cpu_seconds(pid), os.getloadavg()
    started = time.monotonic()
    timeline: list[tuple[float, int]] = []
    cpu_timeline: list[tuple[float, float]] = []
    sampler = threading.Thread(target=sample_rss, args=(pid, timeline, stop, cpu_timeline), daemon=True)
    sampler.start()
    create_all(namespace, [job_manifest(n, gpus, preflight=preflight) for n in names])

    def done() -> bool:
        with seen.lock:
            return all(len(seen.pod_bound.get(n, {})) >= seen.pods_expected.get(n, 1 << 30) for n in names)

    while not done() and time.monotonic() - started < timeout:
        time.sleep(0.5)
    time.sleep(settle)  # status mirroring after the pods run belongs to the per-job cost too
    wall = time.monotonic() - started
    cpu = cpu_seconds(pid) - cpu_before
    stop.set()
    with open(audit_log, encoding="utf-8") as log:
        log.seek(audit_offset)
        requests = operator_requests(log, namespace)
    dropped = audit_errors(apiserver_metrics()) - dropped_before
    if list(audit_log.parent.glob(f"{audit_log.stem}-*{audit_log.suffix}")):
        raise RuntimeError(f"the apiserver rotated {audit_log}: the request count would miss what it moved away")
    idle_before = cpu_seconds(pid)
    time.sleep(IDLE_SECONDS)
    idle_rate = (cpu_seconds(pid) - idle_before) / IDLE_SECONDS
    with seen.lock:
        ours = [seen.rayjob[n] - seen.grpojob[n] for n in names if n in seen.rayjob and n in seen.grpojob]
        kuberay = [seen.raycluster[n] - seen.rayjob[n] for n in names if n in seen.raycluster and n in seen.rayjob]
        complete = [n for n in names if len(seen.pod_bound.get(n, {})) >= seen.pods_expected.get(n, 1 << 30)]
        bound = [max(seen.pod_bound[n].values()) - seen.grpojob[n] for n in complete if n in seen.grpojob]
        missing = {"rayjob": jobs - len(ours), "raycluster": jobs - len(kuberay), "bound": jobs - len(bound)}
        arrived = [seen.grpojob[n] for n in names if n in seen.grpojob]
        created_over = max(arrived) - min(arrived) if arrived else float("nan")
        samples = {n: {stage: table[n] for stage, table in
                       (("grpojob", seen.grpojob), ("rayjob", seen.rayjob), ("raycluster", seen.raycluster))
                       if n in table} for n in names}
        for n in complete:
            samples[n]["bound"] = max(seen.pod_bound[n].values())
    sampler.join()
    return BurstResult(jobs, ours, kuberay, bound, missing, cpu, vm_hwm_bytes(pid), requests, load, wall,
                       created_over, samples, *phases_and_event_reasons(namespace), rss_timeline=timeline,
                       cpu_timeline=[(t, c - cpu_before) for t, c in cpu_timeline],
                       idle_cpu_rate=idle_rate, audit_dropped=dropped)


IDLE_SECONDS = 20.0


def apiserver_metrics() -> str:
    response = API.call_api(*API.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
    return response.read().decode()


def sample_rss(pid: int, timeline: list[tuple[float, int]], stop: threading.Event,
               cpu_timeline: list[tuple[float, float]] | None = None) -> None:
    """The RSS (and the CPU seconds so far) now, before the first create, and each second after, until stopped."""
    while True:
        now = time.monotonic()
        timeline.append((now, rss_bytes(pid)))
        if cpu_timeline is not None:
            cpu_timeline.append((now, cpu_seconds(pid)))
        if stop.wait(1.0):
            return


def cpu_split(result: BurstResult) -> str:
    """The operator's CPU until the first sample after the last RayJob came (the creation burst), per job, and its
    rate after that until the count (keeping the jobs while the cluster binds their pods)."""
    last_rayjob = max((t["rayjob"] for t in result.samples.values() if "rayjob" in t), default=None)
    if last_rayjob is None or not result.cpu_timeline:
        return "no CPU split: no RayJob came, or no CPU samples"
    at, burst = next(((t, c) for t, c in result.cpu_timeline if t >= last_rayjob), result.cpu_timeline[-1])
    end, total = result.cpu_timeline[-1]
    after = f"{(total - burst) / (end - at) * 1000:.0f} ms/s over the {end - at:.0f}s after it" if end > at else \
        "no samples after it"
    return (f"CPU until the last RayJob: {burst:.1f}s ({burst / result.jobs * 1000:.0f} ms/job); {after} "
            f"({(total - burst) / result.jobs * 1000:.0f} ms/job)")


def rss_milestones(result: BurstResult) -> str:
    """When the RSS peaked, against when the last RayJob and the last pod came (seconds after the first create)."""
    if not result.rss_timeline:
        return "no RSS samples"
    at, peak = max(result.rss_timeline, key=lambda sample: sample[1])
    origin = min((t["grpojob"] for t in result.samples.values() if "grpojob" in t), default=at)

    def last(stage: str) -> float:
        times = [t[stage] for t in result.samples.values() if stage in t]
        return max(times) - origin if times else float("nan")

    return (f"RSS sampled each second peaked at {peak / 2**20:.0f} MiB {at - origin:.0f}s after the first GRPOJob; "
            f"last RayJob at "
            f"{last('rayjob'):.0f}s, last pod bound at {last('bound'):.0f}s; RSS before the burst "
            f"{result.rss_timeline[0][1] / 2**20:.0f} MiB, at the end {result.rss_timeline[-1][1] / 2**20:.0f} MiB")


def phases_and_event_reasons(namespace: str) -> tuple[dict[str, int], dict[str, int]]:
    """(GRPOJobs per phase now, the Events on GRPOJobs per reason) in the burst's namespace."""
    custom, core = client.CustomObjectsApi(API), client.CoreV1Api(API)
    items = custom.list_namespaced_custom_object("grpo.dev", "v1alpha1", namespace, "grpojobs")["items"]
    phases = Counter((i.get("status") or {}).get("phase") or "-" for i in items)
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.kind=GRPOJob").items
    reasons = Counter(e.reason or "-" for e in events for _ in range(e.count or 1))
    return phases, reasons



def rss_with_jobs(cluster: LocalCluster, operator: OperatorProcess, jobs: int) -> tuple[int, int]:
    """(RSS, peak RSS) of the operator once `jobs` suspended GRPOJobs and their RayJobs exist.

    Waits until the operator has handled every job (each has a phase), then half a minute more.
    """
    namespace = f"rss-{jobs}"
    prepare_namespace(cluster, namespace)
    names = [f"idle-{i:04d}" for i in range(jobs)]
    create_all(namespace, [job_manifest(n, 8, suspend=True) for n in names])
    custom = client.CustomObjectsApi(API)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        items = custom.list_namespaced_custom_object("grpo.dev", "v1alpha1", namespace, "grpojobs")["items"]
        if sum(bool((i.get("status") or {}).get("phase")) for i in items) == jobs:
            break
        time.sleep(2)
    time.sleep(30)
    return rss_bytes(operator.proc.pid), vm_hwm_bytes(operator.proc.pid)


def rss_after_restart(operator: OperatorProcess, settle: float = 90) -> int:
    """RSS of a freshly started operator that resumed the jobs already there (no burst behind it)."""
    operator.kill()
    operator.start()
    time.sleep(settle)
    return rss_bytes(operator.proc.pid)


# --------------------------------------------------------------------------- report


def row(label: str, values: list[float]) -> str:
    p = [percentile(values, q) for q in (50, 95, 99)]
    return f"  {label:<28} {p[0]:8.3f} {p[1]:8.3f} {p[2]:8.3f} {max(values, default=float('nan')):8.3f}"


def report(result: BurstResult) -> str:
    total = sum(result.requests.values())
    verbs = ", ".join(f"{v} {c / result.jobs:.1f}" for v, c in sorted(by_verb(result.requests).items()))
    ratio99 = percentile(result.ours, 99) / percentile(result.kuberay, 99)
    ratio50 = percentile(result.ours, 50) / percentile(result.kuberay, 50)
    return "\n".join([
        f"N={result.jobs}  (load before burst {result.load[0]:.2f} {result.load[1]:.2f} {result.load[2]:.2f}; "
        f"wall {result.wall:.0f}s; GRPOJobs arrived over {result.created_over:.2f}s)",
        f"  {'seconds':<28} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}",
        row("ours: GRPOJob -> RayJob", result.ours),
        row("KubeRay: RayJob -> RayCluster", result.kuberay),
        row("GRPOJob -> all pods bound", result.bound),
        f"  ratio ours/KubeRay: p50 {ratio50:.2f}  p99 {ratio99:.2f}",
        f"  operator: CPU {result.cpu_seconds:.1f}s ({result.cpu_seconds / result.jobs * 1000:.0f} ms/job), "
        f"peak RSS {result.peak_rss / 2**20:.0f} MiB, API requests/job {total / result.jobs:.1f} ({verbs})",
        *([f"  UNDERCOUNTED: the apiserver dropped {result.audit_dropped} audit events during the burst "
           f"(apiserver_audit_error_total); the requests above are a lower bound"] if result.audit_dropped else []),
        f"  not reached: {result.missing}",
        f"  {rss_milestones(result)}",
        f"  {cpu_split(result)}",
        f"  operator CPU in the {IDLE_SECONDS:.0f}s after the count (KubeRay may still be starting clusters): "
        f"{result.idle_cpu_rate * 1000:.0f} ms/s",
        f"  GRPOJob phases at the end: {describe_counts(result.phases, 1)}",
        f"  operator Events per job by reason: {describe_counts(result.event_reasons, result.jobs)}",
        "  API requests per job by call site (who, verb, resource):",
        *per_call_site(result.requests, result.jobs),
    ])


# --------------------------------------------------------------------------- main


def start_cluster(workdir: Path, nodes: int, audit_dir: Path) -> LocalCluster:
    audit_dir.mkdir(parents=True, exist_ok=True)
    policy = audit_dir / "policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = audit_dir / "audit.log"
    audit_log.unlink(missing_ok=True)
    # No rotation: the count reads audit.log from the burst's offset, and the apiserver's 0 means lumberjack's
    # default of 100 MB (a 1000-job burst writes more: the eighth round's floor count read the new file and found 0).
    args = (f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}", f"--audit-log-maxsize={AUDIT_LOG_MB}",
            "--audit-log-mode=batch", "--audit-log-batch-max-wait=1s",
            # The default 10,000 events fill up when KWOK and KubeRay write thousands of pods in a 1000-job burst;
            # whatever is dropped past it is counted by audit_errors and reported.
            f"--audit-log-batch-buffer-size={AUDIT_BUFFER_EVENTS}")
    # Ray jobs run for an hour: the benchmark measures start-up, not completion.
    cluster = LocalCluster(workdir, Ports.free(), pools=(NodePool("train", nodes),), ray_job_running_seconds=3600,
                           apiserver_args=args)
    return cluster.start()


def image_python(workdir: Path) -> tuple[str, dict[str, str]]:
    """An interpreter with exactly the operator image's packages (images/operator/requirements.lock, the
    Dockerfile's install), and the environment that puts the working tree's grpo_operator on its path
    and sets the image's allocator.

    The dev virtualenv also holds the trainer's and the tests' packages; among them `kubernetes`, which
    kopf imports whenever it is installed, so the dev environment overstates the image's memory.
    """
    venv = workdir / "operator-image-venv"
    python = venv / "bin" / "python"
    lock = ROOT / "images" / "operator" / "requirements.lock"
    stamp = venv / ".lock-sha"
    digest = subprocess.run(["sha256sum", str(lock)], capture_output=True, text=True, check=True).stdout.split()[0]
    if not stamp.exists() or stamp.read_text() != digest:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "-r", str(lock)],
                       check=True)
        stamp.write_text(digest)
    # The image's ENV (images/operator/Dockerfile) that changes the operator's behaviour.
    return str(python), {"PYTHONPATH": str(ROOT / "operator"), "PYTHONMALLOC": "malloc"}


class FloorProcess:
    """floor.py in the operator's place: the same children for each new GRPOJob and nothing else."""

    def __init__(self, cluster: LocalCluster, log_dir: Path, namespace: str, extra_env: dict[str, str],
                 python: str) -> None:
        self.cluster, self.log, self.namespace = cluster, log_dir / "floor.log", namespace
        self.extra_env, self.python = extra_env, python
        self.proc: subprocess.Popen | None = None

    def start(self) -> FloorProcess:
        env = {**os.environ, **self.cluster.env(), "PYTHONUNBUFFERED": "1", **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT / "operator")) if p)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([self.python, str(Path(__file__).with_name("floor.py")), self.namespace],
                                         env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while "watching" not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"floor.py did not start; see {self.log}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)


def configure_client(cluster: LocalCluster) -> None:
    """One ApiClient for this script, renamed so the audit log tells its requests from the operator's."""
    global API
    configuration = config.new_client_from_config(str(cluster.kubeconfig)).configuration
    # An overloaded apiserver answers 504/429 now and then; the benchmark retries like the operator does.
    configuration.retries = Retry(total=8, backoff_factor=0.5, status_forcelist=(429, 500, 502, 503, 504),
                                  allowed_methods=None, raise_on_status=False)
    API = client.ApiClient(configuration)
    API.user_agent = BENCH_AGENT


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--jobs", type=int, nargs="*", default=[50, 200, 500])
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per job (4: two jobs per 8-GPU node)")
    parser.add_argument("--rss-jobs", type=int, default=0, help="also measure RSS with this many jobs present")
    parser.add_argument("--timeout", type=float, default=600, help="per burst")
    parser.add_argument("--settle", type=float, default=10, help="seconds to keep counting after the last bind")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "grpo-bench-operator")
    parser.add_argument("--operator-env", action="append", default=[], help="KEY=VALUE for the operator")
    parser.add_argument("--floor", action="store_true",
                        help="run floor.py (the same children, nothing else) in the operator's place: the baseline "
                             "for the operator's own cost on this machine")
    parser.add_argument("--samples", type=Path, default=None,
                        help="write each job's stage times (monotonic seconds) to SAMPLES-<N>.json")
    parser.add_argument("--preflight", action="store_true",
                        help="jobs with the preflight Job before the RayJob (default: without, as earlier rounds)")
    parser.add_argument("--as-image", action="store_true",
                        help="run the operator with only the operator image's locked packages (a venv in --workdir)")
    args = parser.parse_args(argv)
    extra_env = dict(kv.split("=", 1) for kv in args.operator_env)
    python = sys.executable
    if args.as_image:
        python, image_env = image_python(args.workdir)
        extra_env = {**image_env, **extra_env}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    print(f"git {commit.stdout.strip()}; {os.cpu_count()} CPUs; nodes {args.nodes}; GPUs/job {args.gpus}; "
          f"operator env {extra_env}; operator python {python}", flush=True)
    runs: list[tuple[int, str]] = [(n, "burst") for n in args.jobs]
    if args.rss_jobs:
        runs.append((args.rss_jobs, "rss"))
    for jobs, kind in runs:
        workdir = args.workdir / f"{kind}-{jobs}"
        cluster = start_cluster(workdir / "cluster", args.nodes, workdir / "audit")
        try:
            configure_client(cluster)
            install_crd(cluster)
            if args.floor and kind == "burst":
                operator = FloorProcess(cluster, workdir / "logs", f"bench-{jobs}", extra_env, python).start()
            else:
                operator = OperatorProcess(cluster, workdir / "logs", extra_env, python=python).start()
            try:
                if kind == "burst":
                    result = run_burst(cluster, operator, workdir / "audit" / "audit.log", jobs, args.gpus,
                                       args.timeout, args.settle, args.preflight)
                    print(report(result), flush=True)
                    if args.samples:
                        out = args.samples.with_name(f"{args.samples.stem}-{jobs}.json")
                        out.write_text(json.dumps(result.samples, indent=1))
                else:
                    rss, peak = rss_with_jobs(cluster, operator, jobs)
                    print(f"RSS with {jobs} GRPOJobs (suspended, each with its RayJob): {rss / 2**20:.0f} MiB "
                          f"(peak {peak / 2**20:.0f} MiB; load {os.getloadavg()[0]:.2f})", flush=True)
                    resumed = rss_after_restart(operator)
                    print(f"  after a restart that resumed them: {resumed / 2**20:.0f} MiB", flush=True)
            finally:
                operator.stop()
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
