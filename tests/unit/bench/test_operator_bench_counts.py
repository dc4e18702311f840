"""bench/operator/bench.py's request counts: read from audit events, attributed to the operator's call sites."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _bench():
    spec = importlib.util.spec_from_file_location("operator_bench", ROOT / "bench" / "operator" / "bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _event(agent: str, verb: str, resource: str, namespace: str | None = "bench-2", sub: str | None = None) -> str:
    ref = {"resource": resource, **({"namespace": namespace} if namespace else {}),
           **({"subresource": sub} if sub else {})}
    return json.dumps({"userAgent": agent, "verb": verb, "objectRef": ref})


def test_requests_are_attributed_to_call_sites_and_others_are_left_out() -> None:
    bench = _bench()
    lines = [
        _event("grpo-operator/0.9.0 (mirror-rayjob)", "get", "grpojobs"),
        _event("grpo-operator/0.9.0 (mirror-rayjob)", "get", "grpojobs"),
        _event("grpo-operator/0.9.0 (create)", "patch", "grpojobs", sub="status"),
        _event("kopf/1.38.0", "watch", "rayjobs", namespace=None),
        _event("grpo-operator/0.9.0 (create)", "get", "persistentvolumeclaims", namespace="other-ns"),
        _event("grpo-bench", "create", "grpojobs"),
        "not json",
    ]
    counts = bench.operator_requests(lines, "bench-2")
    assert counts == {("mirror-rayjob", "get", "grpojobs"): 2, ("create", "patch", "grpojobs/status"): 1,
                      ("kopf", "watch", "rayjobs"): 1}
    assert bench.by_verb(counts) == {"get": 2, "patch": 1, "watch": 1}
    table = bench.per_call_site(counts, jobs=2)
    assert table[0].split() == ["mirror-rayjob", "get", "grpojobs", "1.00"]


def test_the_rss_peak_is_placed_against_the_last_rayjob_and_the_last_pod() -> None:
    bench = _bench()
    samples = {"job-0": {"grpojob": 100.0, "rayjob": 103.0, "bound": 130.0},
               "job-1": {"grpojob": 101.0, "rayjob": 110.0}}
    result = bench.BurstResult(2, [3.0, 9.0], [], [30.0], {}, 1.0, 0, {}, (0.0, 0.0, 0.0), 40.0, 1.0, samples,
                               rss_timeline=[(105.0, 90 << 20), (111.0, 150 << 20), (135.0, 120 << 20)])
    assert bench.rss_milestones(result) == (
        "RSS sampled each second peaked at 150 MiB 11s after the first GRPOJob; last RayJob at 10s, "
        "last pod bound at 30s; RSS before the burst 90 MiB, at the end 120 MiB")


def test_phases_and_event_reasons_are_counted_per_job() -> None:
    bench = _bench()
    assert bench.describe_counts({"Created": 200, "ClaimNotBound": 26}, 200) == "Created 1.00, ClaimNotBound 0.13"
    assert bench.describe_counts({"Pending": 3, "Running": 7}, 1) == "Running 7, Pending 3"
    assert bench.describe_counts({}, 1) == "none"


def test_audit_events_the_apiserver_dropped_mark_the_request_count_as_a_lower_bound() -> None:
    bench = _bench()
    metrics = "\n".join([
        "# HELP apiserver_audit_error_total [ALPHA] Counter of audit events that failed to be audited properly.",
        "# TYPE apiserver_audit_error_total counter",
        'apiserver_audit_error_total{plugin="buffered"} 1200',
        'apiserver_audit_error_total{plugin="log"} 3',
        "apiserver_audit_event_total 90000",
    ])
    assert bench.audit_errors(metrics) == 1203
    assert bench.audit_errors("apiserver_audit_event_total 5\n") == 0
    result = bench.BurstResult(2, [3.0, 9.0], [4.0, 5.0], [30.0], {}, 1.0, 0, {("kopf", "watch", "rayjobs"): 2},
                               (0.0, 0.0, 0.0), 40.0, 1.0, {}, audit_dropped=1203)
    assert "UNDERCOUNTED: the apiserver dropped 1203 audit events" in bench.report(result)
    clean = bench.BurstResult(2, [3.0, 9.0], [4.0, 5.0], [30.0], {}, 1.0, 0, {("kopf", "watch", "rayjobs"): 2},
                              (0.0, 0.0, 0.0), 40.0, 1.0, {})
    assert "UNDERCOUNTED" not in bench.report(clean)


def test_cpu_is_split_at_the_first_sample_after_the_last_rayjob() -> None:
    bench = _bench()
    samples = {"job-0": {"grpojob": 100.0, "rayjob": 101.5}, "job-1": {"grpojob": 100.2, "rayjob": 103.2},
               "job-2": {"grpojob": 100.4}}
    cpu = [(100.0, 0.0), (101.0, 0.5), (102.0, 1.0), (103.0, 1.4), (104.0, 1.6), (106.0, 1.8), (110.0, 2.0)]
    result = bench.BurstResult(3, [], [], [], {}, 2.0, 0, {}, (0.0, 0.0, 0.0), 10.0, 0.4, samples, cpu_timeline=cpu)
    # The last RayJob came at 103.2: the burst is 1.6 s of CPU by the 104.0 sample, 0.4 s over the 6 s after it.
    assert bench.cpu_split(result) == ("CPU until the last RayJob: 1.6s (533 ms/job); 67 ms/s over the 6s after it "
                                       "(133 ms/job)")
    assert bench.cpu_split(bench.BurstResult(3, [], [], [], {}, 2.0, 0, {}, (0.0, 0.0, 0.0), 10.0, 0.4,
                                             {"job-0": {"grpojob": 100.0}}, cpu_timeline=cpu)).startswith("no CPU")
