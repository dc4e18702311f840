"""Bad (and good) input, generated from the pydantic model, judged by the real apiserver and KubeRay CRDs.

Every leaf of GRPOJobSpec's JSON schema (the same schema the CRD is generated from) gets a strategy
for values its constraints allow and for values they refuse. Specs are the examples with a few
leaves changed; the model plus the planner decide which are valid:

- invalid: the apiserver refuses it (server-side dry run): what the spec alone decides never reaches the
  operator (what needs cluster state, a missing claim, is test_operator's);
- valid: the apiserver accepts it, and the RayJob it renders is accepted by KubeRay's real CRD.

Then: random valid specs created and deleted, a namespace deleted under a running job, a spec edited while
running.
"""

from __future__ import annotations

import copy
import json
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kwok_config import STORAGE_CLASS, node_manifests
from grpo_devcluster.operator_runner import EXAMPLE_CLAIMS, OperatorProcess, claim_manifest
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import PlanError, plan
from grpo_operator.reconcile.capacity import NodeView, capacity_shortfalls
from grpo_operator.render import render_children
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from .grpojobs import apply_job, example, set_ray_outcome, wait_phase
from .kube import ApiError, create_namespace, get, items, wait_event, wait_for, wait_object

pytestmark = pytest.mark.e2e

BASES = ("colocated-length", "reference-disaggregated")
SCHEMA = GRPOJobSpec.model_json_schema(by_alias=True)
CHILD_KINDS = ("rayjobs", "configmaps", "serviceaccounts", "roles", "rolebindings", "jobs", "pvc", "networkpolicies")
# Leaves whose refusal the apiserver cannot judge from the spec alone are still generated; the
# few kinds of value that only make sense as objects (env, tolerations, selectors) are not leaves.
SCALAR_TYPES = {"integer", "number", "string", "boolean"}


# --------------------------------------------------------------------------- the model's leaves


@dataclass(frozen=True)
class Leaf:
    path: tuple[str, ...]
    schema: dict


def _resolve(node: dict) -> dict:
    """Inline $ref, single allOf and Optional (anyOf with null), keeping the node's own keys."""
    while True:
        if "$ref" in node:
            target = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
        elif "anyOf" in node:
            non_null = [n for n in node["anyOf"] if n.get("type") != "null"]
            if len(non_null) != 1:
                return node
            node = {**non_null[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        else:
            return node


def leaves(node: dict = SCHEMA, path: tuple[str, ...] = ()) -> list[Leaf]:
    node = _resolve(node)
    if node.get("type") == "object" and "properties" in node:
        return [leaf for key, sub in node["properties"].items() for leaf in leaves(sub, (*path, key))]
    if node.get("type") in SCALAR_TYPES or "enum" in node or "const" in node:
        return [Leaf(path, node)]
    return []


LEAVES = leaves()


def cel_messages(node: Any = SCHEMA) -> set[str]:
    """Messages of the model's CEL rules: the cross-field checks only the apiserver evaluates."""
    if isinstance(node, dict):
        own = {rule["message"] for rule in node.get("x-kubernetes-validations", []) if "message" in rule}
        return own.union(*(cel_messages(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(cel_messages(v) for v in node))
    return set()


CEL_MESSAGES = cel_messages()


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _float32_at_or_above(value: float) -> float:
    """The smallest float32 >= value (a bound like 0.1 has no float32 of its own; hypothesis' width=32 needs one)."""
    near = _float32(value)
    return _next_float32(near, up=True) if near < value else near


def _float32_at_or_below(value: float) -> float:
    near = _float32(value)
    return _next_float32(near, up=False) if near > value else near


def _next_float32(value: float, up: bool) -> float:
    bits = struct.unpack("<i", struct.pack("<f", value))[0]
    step = 1 if (value >= 0) == up else -1
    return struct.unpack("<f", struct.pack("<i", bits + step))[0]


def valid_values(schema: dict) -> st.SearchStrategy[Any]:
    """Values the leaf's own constraints allow (cross-field rules may still refuse them)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low = schema.get("minimum", 0)
        high = schema.get("maximum", low + 10_000)
        # Small values are where the cross-field rules (GPUs per node, TP, batch sizes) live.
        return st.one_of(st.integers(low, min(high, low + 16)), st.integers(low, high))
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0.0))
        high = schema.get("maximum", low + 100.0)
        low, high = _float32_at_or_above(low), _float32_at_or_below(high)
        return st.floats(low, high, exclude_min="exclusiveMinimum" in schema, allow_nan=False, width=32)
    if kind == "string":
        size = {"min_size": schema.get("minLength", 0), "max_size": min(schema.get("maxLength", 40), 40)}
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda s: size["min_size"] <= len(s) <= schema.get("maxLength", 1 << 30))
        if "validations" in json.dumps(schema):  # paths: relative, no '..'
            return st.from_regex(r"[a-z][a-z0-9_]{0,12}(/[a-z0-9_]{1,12}){0,2}\.(jsonl|parquet)", fullmatch=True)
        return st.text(st.characters(codec="ascii", categories=("L", "N")), **size)
    raise AssertionError(f"no strategy for {schema}")


def invalid_values(schema: dict) -> st.SearchStrategy[Any]:
    """Values the leaf's own constraints refuse: out of range, outside the enum, not matching, wrong type."""
    options: list[st.SearchStrategy[Any]] = [st.just({"not": "a scalar"})]
    if "enum" in schema or "const" in schema:
        allowed = schema.get("enum", [schema.get("const")])
        options.append(st.sampled_from(["", "Auto", "none", "sharded", "VLLM"]).filter(lambda v: v not in allowed))
    kind = schema.get("type")
    if kind in ("integer", "number"):
        options.append(st.sampled_from(["12", "many", True]))
        if "minimum" in schema:
            options.append(st.just(schema["minimum"] - 1))
        if "exclusiveMinimum" in schema:
            options.append(st.just(schema["exclusiveMinimum"]))
        if "maximum" in schema:
            options.append(st.just(schema["maximum"] + 1))
    if kind == "boolean":
        options.append(st.sampled_from(["yes", 1]))
    if kind == "string":
        options.append(st.integers(-5, 5))
        if schema.get("minLength", 0) >= 1:
            options.append(st.just(""))
        if "maxLength" in schema:
            options.append(st.just("a" * (schema["maxLength"] + 1)))
        if "pattern" in schema:
            options.append(st.sampled_from(["Has Spaces", "UPPER", "-dash-", "x/../y", "ümlaut"]).filter(
                lambda v: re.fullmatch(schema["pattern"], v) is None))
    return st.one_of(options)


def set_path(body: dict, path: tuple[str, ...], value: Any) -> None:
    """body[path] = value, making (or replacing a scalar by) the objects on the way."""
    node = body
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[path[-1]] = value


@st.composite
def specs(draw: st.DrawFn, invalid: bool) -> dict:
    """A GRPOJob: an example with 0-3 allowed leaf changes and, if `invalid`, one refused change."""
    body = copy.deepcopy(example(draw(st.sampled_from(BASES))))
    for leaf in draw(st.lists(st.sampled_from(LEAVES), max_size=3, unique_by=lambda leaf: leaf.path)):
        set_path(body["spec"], leaf.path, draw(valid_values(leaf.schema)))
    if invalid:
        kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "unknown-field"]))
        if kind == "leaf":
            leaf = draw(st.sampled_from(LEAVES))
            set_path(body["spec"], leaf.path, draw(invalid_values(leaf.schema)))
        else:
            objects = [leaf.path[:-1] for leaf in LEAVES if len(leaf.path) > 1]
            set_path(body["spec"], (*draw(st.sampled_from(objects)), "bogusField"), 1)
    body["metadata"]["name"] = draw(st.from_regex(r"[a-z][a-z0-9]{2,8}", fullmatch=True))
    return body


def judge(body: dict) -> str | None:
    """None if the model and the planner accept the spec, else the field of their first complaint."""
    try:
        spec = GRPOJobSpec.model_validate(body["spec"])
        plan(spec, name=body["metadata"]["name"], namespace="ns", default_image="grpo-trainer:test")
    except ValidationError as exc:
        return "spec." + ".".join(str(p) for p in exc.errors()[0]["loc"])
    except PlanError as exc:
        return f"spec.{exc.field}"
    return None


# --------------------------------------------------------------------------- apiserver access


@pytest.fixture(scope="module")
def dry_ns(cluster: LocalCluster, grpo_operator: OperatorProcess) -> Iterator[str]:
    """A namespace for server-side dry runs, once the GRPOJob CRD is installed (with the operator running)."""
    yield create_namespace(cluster, "properties-dry-run")
    cluster.api.delete("namespaces", "properties-dry-run")


def dry_run_create(cluster: LocalCluster, namespace: str, body: dict) -> ApiError | None:
    """The apiserver's verdict on creating `body`, strict about unknown fields as kubectl is; nothing is stored."""
    try:
        cluster.api.create({**body, "metadata": {**body["metadata"], "namespace": namespace}}, dry_run=True)
    except ApiError as exc:
        return exc
    return None


# How many specs each property test must have judged: a run that generated fewer proves too little.
ENOUGH = 200
# More draws than the 200 valid specs asked for: cross-field rules (CEL and the planner) refuse a share of the
# "allowed" leaf changes (resumeFrom needs jobName or path; several actor pods cannot share a ReadWriteOnce
# claim; the admission rules on batch sizes and sampling refuse about a tenth).
VALID_DRAWS = settings(max_examples=360, deadline=None, derandomize=True, database=None,
                       suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                              HealthCheck.data_too_large])
INVALID_DRAWS = settings(VALID_DRAWS, max_examples=260)


def test_every_valid_spec_is_accepted_and_renders_a_rayjob_kuberay_accepts(
        cluster: LocalCluster, dry_ns: str) -> None:
    judged = 0

    @VALID_DRAWS
    @given(body=specs(invalid=False))
    def accepted(body: dict) -> None:
        nonlocal judged
        if judge(body) is not None:
            return  # an allowed change that a cross-field rule refuses: the invalid test's business
        refused = dry_run_create(cluster, dry_ns, body)
        if refused is not None:
            # Only one of the model's own CEL rules (which pydantic does not evaluate) may refuse it.
            assert refused.status == 422 and any(m in refused.body for m in CEL_MESSAGES), refused.body
            return
        judged += 1
        spec = GRPOJobSpec.model_validate(body["spec"])
        job_plan = plan(spec, name=body["metadata"]["name"], namespace=dry_ns, default_image="grpo-trainer:test")
        rayjob = next(c for c in render_children(spec, job_plan) if c["kind"] == "RayJob")
        refused = dry_run_create(cluster, dry_ns, rayjob)
        assert refused is None, f"KubeRay's CRD refused the rendered RayJob: {refused.body if refused else ''}"

    accepted()
    assert judged >= ENOUGH, f"only {judged} valid specs reached the apiserver"


@dataclass
class InvalidVerdicts:
    judged: int = 0
    refused: int = 0
    # Specs the model refuses but the apiserver accepts, by the field the model names (one body each).
    escaped: dict[str, dict] = field(default_factory=dict)


def test_every_spec_the_model_refuses_is_refused_by_the_apiserver(cluster: LocalCluster, dry_ns: str) -> None:
    """What the spec alone decides is the apiserver's to refuse (DESIGN: CEL), so no generated invalid spec may get
    through to the operator. (An earlier version also had the operator judge the specs that got through; in every
    run there were none, so it passed with zero cases: the claim is now that there are none.)"""
    verdicts = InvalidVerdicts()

    @INVALID_DRAWS
    @given(body=specs(invalid=True))
    def refuse(body: dict) -> None:
        problem = judge(body)
        if problem is None:
            return  # the "refused" value was harmless after all (e.g. a number given as an integer)
        verdicts.judged += 1
        refused = dry_run_create(cluster, dry_ns, body)
        if refused is None:
            verdicts.escaped.setdefault(problem, copy.deepcopy(body))
        else:
            assert refused.status in (400, 422), refused.body  # 400: unknown field, strict decoding
            verdicts.refused += 1

    refuse()
    assert verdicts.judged >= ENOUGH, verdicts
    assert verdicts.escaped == {}, f"the apiserver accepted specs the model refuses, naming {sorted(verdicts.escaped)}"


# --------------------------------------------------------------------------- objects, not specs


def assert_no_children(cluster: LocalCluster, ns: str) -> None:
    leftovers = {k: [o["metadata"]["name"] for o in items(cluster, k, "-n", ns, "-l", "grpo.dev/job")]
                 for k in CHILD_KINDS}
    assert all(v == [] for v in leftovers.values()), leftovers


def claims_of(spec: Any) -> set[str]:
    """Every claimName anywhere in a spec."""
    if isinstance(spec, dict):
        own = {spec["claimName"]} if isinstance(spec.get("claimName"), str) else set()
        return own.union(*(claims_of(v) for v in spec.values()))
    if isinstance(spec, list):
        return set().union(*(claims_of(v) for v in spec))
    return set()


def test_valid_random_specs_created_then_deleted_leave_only_the_retained_checkpoints(
        cluster: LocalCluster, team_ns: str, grpo_operator: OperatorProcess) -> None:
    bodies = _valid_samples(8, lambda body: dry_run_create(cluster, team_ns, body) is None)
    for index, body in enumerate(bodies):
        body["metadata"]["name"] = f"rand-{index}"
        body["spec"].setdefault("scheduling", {})["suspend"] = True  # children, but no pods to wait for
        for claim in claims_of(body["spec"]) - set(EXAMPLE_CLAIMS):  # those the namespace has already
            cluster.apply(claim_manifest(team_ns, claim, "1Gi"))
        apply_job(cluster, team_ns, body)
    for index in range(len(bodies)):
        wait_phase(cluster, team_ns, f"rand-{index}", "Suspended")
    cluster.kubectl("delete", "grpojobs", "--all", "-n", team_ns, "--wait=true", timeout=120)
    wait_for("children garbage-collected", lambda: all(
        not items(cluster, kind, "-n", team_ns, "-l", "grpo.dev/job") for kind in CHILD_KINDS if kind != "pvc"),
        timeout=120)
    kept = {p["metadata"]["name"] for p in items(cluster, "pvc", "-n", team_ns, "-l", "grpo.dev/job")}
    retained = {f"rand-{i}-checkpoints" for i, b in enumerate(bodies)
                if b["spec"].get("checkpoints", {}).get("deletePolicy", "Retain") == "Retain"
                and not b["spec"].get("checkpoints", {}).get("volume", {}).get("claimName")}
    wait_for("owned checkpoint claims deleted", lambda: {
        p["metadata"]["name"] for p in items(cluster, "pvc", "-n", team_ns, "-l", "grpo.dev/job")} == retained)
    assert kept >= retained
    assert grpo_operator.alive()


DEVCLUSTER_NODES = [NodeView.of(n) for n in node_manifests()]


def fits_the_devcluster(body: dict) -> bool:
    """Whether the session's fake nodes can hold every role (else the operator says InsufficientCapacity),
    and the preflight pod can start here, suspended job or not: its new checkpoint claim binds (the
    devcluster's StorageClass) and it names no PriorityClass (the devcluster has none); and it names no GRPORuntime
    (cluster state, like a claim: test_runtimes.py's)."""
    spec = GRPOJobSpec.model_validate(body["spec"])
    job_plan = plan(spec, name=body["metadata"]["name"], namespace="ns", default_image="grpo-trainer:test")
    binds = spec.checkpoints.volume.storage_class_name in (None, STORAGE_CLASS)
    pod_starts = binds and spec.scheduling.priority_class_name is None and spec.runtime is None
    return pod_starts and not capacity_shortfalls(job_plan, DEVCLUSTER_NODES)


def _valid_samples(count: int, accepted: Callable[[dict], bool]) -> list[dict]:
    """`count` specs the model, the planner, the devcluster's nodes and the apiserver (`accepted`: its CEL
    rules, which pydantic does not evaluate) all accept."""
    found: list[dict] = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=specs(invalid=False))
    def collect(body: dict) -> None:
        if len(found) < count and judge(body) is None and not body["spec"].get("checkpoints", {}).get(
                "volume", {}).get("claimName") and body["spec"]["reward"].get("type") != "function" \
                and fits_the_devcluster(body) and accepted(body):
            found.append(copy.deepcopy(body))

    collect()
    assert len(found) == count
    return found


def _metric(operator: OperatorProcess, name: str) -> float:
    import urllib.request
    text = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        operator.metrics_url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_namespace_deleted_under_a_running_job_is_let_go_without_errors(
        cluster: LocalCluster, team_ns: str, grpo_operator: OperatorProcess) -> None:
    body = example("colocated-length")
    name = body["metadata"]["name"]
    set_ray_outcome(cluster, team_ns, name, "RUNNING", "still training", after_seconds=0)
    apply_job(cluster, team_ns, body)
    wait_phase(cluster, team_ns, name, "Running")
    errors_before = _metric(grpo_operator, "grpo_operator_child_create_errors_total")
    cluster.kubectl("delete", "namespace", team_ns, "--wait=false")
    wait_object(cluster, "namespaces", team_ns, None, lambda ns: ns is None, timeout=180,
                what=f"namespace {team_ns} gone")
    assert grpo_operator.alive()
    assert _metric(grpo_operator, "grpo_operator_child_create_errors_total") == errors_before
    job_series = f'grpo_operator_job_phase{{grpojob="{name}",namespace="{team_ns}"'
    wait_for("the job's phase series dropped", lambda: _metric(grpo_operator, job_series) == 0, timeout=30)


def test_spec_edited_while_running_keeps_the_job_and_says_the_edit_is_not_applied(
        cluster: LocalCluster, team_ns: str, grpo_operator: OperatorProcess) -> None:
    body = example("colocated-length")
    name = body["metadata"]["name"]
    set_ray_outcome(cluster, team_ns, name, "SUCCEEDED", "done", after_seconds=8)
    apply_job(cluster, team_ns, body)
    wait_phase(cluster, team_ns, name, "Running")
    rayjob_before = get(cluster, "rayjob", name, "-n", team_ns)
    # spec.verl is the one part the CRD leaves editable (the rest is refused by CEL, see test_operator).
    cluster.kubectl("patch", "grpojob", name, "-n", team_ns, "--type=merge", "-p", json.dumps(
        {"spec": {"verl": {"actor_rollout_ref.actor.optim.lr": 3e-6}}}))
    wait_phase(cluster, team_ns, name, "Succeeded", timeout=120)
    rayjob_after = get(cluster, "rayjob", name, "-n", team_ns)
    assert rayjob_after["metadata"]["uid"] == rayjob_before["metadata"]["uid"]
    assert rayjob_after["spec"]["entrypoint"] == rayjob_before["spec"]["entrypoint"]
    verl = yaml.safe_load(get(cluster, "configmap", f"{name}-verl", "-n", team_ns)["data"]["verl.yaml"])
    assert "actor_rollout_ref.actor.optim.lr" not in verl or verl["actor_rollout_ref.actor.optim.lr"] != 3e-6
    ignored = wait_event(cluster, team_ns, name, "SpecChangeNotApplied")
    assert "spec.verl changed" in ignored["message"]
    assert [r["metadata"]["name"] for r in items(cluster, "rayjobs", "-n", team_ns)] == [name]
