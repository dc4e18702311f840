"""The Helm chart against a real control plane, the operator under the chart's RBAC, and real Prometheus.

On the session's cluster, with the session's operator paused for the module (two operators would reconcile the
same GRPOJobs). The chart's Deployment runs only in simulation here (a KWOK pod); the real operator process
runs out-of-cluster with the args and env of that Deployment and a token of the chart's ServiceAccount
(TokenRequest), which is what proves the chart's RBAC sufficient, while `kubectl auth can-i` and denied requests
prove it not too wide. (The real-node tests run the image itself as a pod: tests/e2e/real/test_operator_pod.py.)
Everything the module creates has names of its own and is removed at its end.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from grpo_devcluster import processes
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.operator_runner import prepare_job_namespace

from .grpojobs import apply_job, condition, example, set_ray_outcome, wait_phase
from .helm import CHART, Release, helm, install, selftest
from .kube import create_namespace, delete_namespace, get, items, wait_event, wait_for
from .prom import prometheus

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULES = CHART / "files" / "prometheus-rules.yaml"
EXAMPLE = "colocated-length"
EXAMPLE_JOB = "qwen2-7b-length"
RELEASE, RELEASE_NAMESPACE = "chart", "grpo-chart-system"
TEAM_NAMESPACES = ("team-chart", "team-scoped", "team-metrics", "team-alerts")


@pytest.fixture(scope="module")
def chart_cluster(cluster: LocalCluster, operator_paused: None) -> Iterator[LocalCluster]:
    yield cluster
    for namespace in TEAM_NAMESPACES:  # before the session's operator comes back
        delete_namespace(cluster, namespace, wait_for_jobs=True)


@pytest.fixture(scope="module")
def release(chart_cluster: LocalCluster) -> Iterator[Release]:
    installed = install(chart_cluster, RELEASE, RELEASE_NAMESPACE)
    yield installed
    helm(chart_cluster, "uninstall", installed.name, "-n", installed.namespace, "--wait", check=False)
    chart_cluster.api.delete("namespaces", installed.namespace)


def team_namespace(cluster: LocalCluster, name: str) -> str:
    """A namespace with the `models`, `datasets` and `exports` claims the examples mount."""
    create_namespace(cluster, name)  # waits for the namespace's default ServiceAccount
    return prepare_job_namespace(cluster, name)


def token_kubeconfig(cluster: LocalCluster, release: Release, path: Path) -> Path:
    """The cluster's kubeconfig with the chart ServiceAccount's token (TokenRequest) as the only user."""
    token = cluster.kubectl("create", "token", release.service_account, "-n", release.namespace,
                            "--duration=1h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = f"{release.namespace}-{release.service_account}"
    config["users"] = [{"name": user, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = user
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class RunningOperator:
    log: Path
    metrics_port: int

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


def deployment_container(cluster: LocalCluster, release: Release) -> dict:
    deployment = get(cluster, "deployment", release.fullname, "-n", release.namespace)
    return deployment["spec"]["template"]["spec"]["containers"][0]


# What the downward API gives the chart's pod (its name and namespace), for the same process outside a pod.
def _downward(field_path: str, namespace: str) -> str:
    return {"metadata.name": "grpo-operator-out-of-cluster", "metadata.namespace": namespace}[field_path]


def loopback_command(container: dict, liveness_port: int, metrics_port: int, namespace: str
                     ) -> tuple[list[str], dict[str, str]]:
    """The chart's container args and env, with its listeners moved from 0.0.0.0 to free loopback ports."""
    args = [f"--liveness=http://127.0.0.1:{liveness_port}" if a.startswith("--liveness=") else a
            for a in container.get("args") or []]
    # An empty value comes back from the apiserver without its `value` key.
    env = {e["name"]: _downward(e["valueFrom"]["fieldRef"]["fieldPath"], namespace) if "valueFrom" in e
           else e.get("value", "") for e in container.get("env") or []}
    env |= {"GRPO_OPERATOR_METRICS_HOST": "127.0.0.1", "GRPO_OPERATOR_METRICS_PORT": str(metrics_port)}
    return args, env


@contextlib.contextmanager
def operator_as(cluster: LocalCluster, release: Release, workdir: Path) -> Iterator[RunningOperator]:
    """The real operator, out-of-cluster, as the chart's Deployment would run it, with the chart SA's token."""
    kubeconfig = token_kubeconfig(cluster, release, workdir / "kubeconfig")
    liveness_port, metrics_port = processes.free_ports(2)
    args, env = loopback_command(deployment_container(cluster, release), liveness_port, metrics_port,
                                 release.namespace)
    # The chart elects a leader: this process takes the release's Lease with the chart's rights, then reconciles.
    assert any(a.startswith("--leader-elect=") for a in args), args
    started = processes.start("grpo-operator", [sys.executable, "-m", "grpo_operator", *args], workdir,
                              env={**env, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"})
    try:
        processes.wait_until("grpo-operator", lambda: processes.http_ok(
            f"http://127.0.0.1:{liveness_port}/readyz"), started, 60)
        yield RunningOperator(started.log, metrics_port)
    finally:
        processes.stop_group(started.pid)


def forbidden_lines(log: Path) -> list[str]:
    """RBAC refusals in the operator's log; not the 403 of a write into a namespace being deleted (a test's namespace
    going while the operator still reports on a job there), which no rule grants or refuses."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if "forbidden" in line.lower() and "because it is being terminated" not in line]


def can_i(cluster: LocalCluster, release: Release, *request: str) -> bool:
    result = cluster.kubectl("auth", "can-i", *request, f"--as={release.subject}", check=False)
    return result.stdout.strip() == "yes"


# --------------------------------------------------------------------------- install


def test_helm_install_runs_the_operator_pod_under_restricted_pod_security(
        chart_cluster: LocalCluster, release: Release) -> None:
    pods = items(chart_cluster, "pods", "-n", release.namespace, "-l", f"app.kubernetes.io/instance={release.name}")
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]  # a leader and a follower
    # The namespace's label is enforced: a pod without the chart's security settings is refused there.
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": release.namespace},
             "spec": {"containers": [{"name": "c", "image": pods[0]["spec"]["containers"][0]["image"]}]}}
    refused = chart_cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(plain), check=False)
    assert refused.returncode != 0 and "restricted" in refused.stderr
    deployment = get(chart_cluster, "deployment", release.fullname, "-n", release.namespace)
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["replicas"] == 2
    budget = get(chart_cluster, "poddisruptionbudget", release.fullname, "-n", release.namespace)
    assert budget["spec"]["maxUnavailable"] == 1
    crds = {c["metadata"]["name"] for c in get(chart_cluster, "crd")["items"]}
    assert "grpojobs.grpo.dev" in crds


def test_install_notes_tell_how_to_apply_the_example_and_where_to_look(release: Release) -> None:
    assert f"kubectl apply -n <namespace> -f examples/{EXAMPLE}.yaml" in release.notes
    assert (ROOT / "examples" / f"{EXAMPLE}.yaml").is_file()
    assert f"kubectl -n {release.namespace} logs deploy/{release.fullname}" in release.notes
    assert "kubectl get grpojobs -n <namespace> -w" in release.notes


def test_chart_crd_is_the_generated_one(chart_cluster: LocalCluster, release: Release) -> None:
    installed = get(chart_cluster, "crd", "grpojobs.grpo.dev")
    generated = yaml.safe_load((ROOT / "crds" / "grpojob.yaml").read_text())
    assert installed["spec"]["versions"][0]["schema"] == generated["spec"]["versions"][0]["schema"]


# --------------------------------------------------------------------------- RBAC


def test_operator_with_the_chart_rbac_reconciles_the_examples_to_succeeded(
        chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    namespace = team_namespace(chart_cluster, "team-chart")
    with operator_as(chart_cluster, release, tmp_path) as operator:
        apply_job(chart_cluster, namespace, example(EXAMPLE))
        # The reference example also runs the converter Job and reads its pod's termination message.
        apply_job(chart_cluster, namespace, example("reference-disaggregated"))
        seen = wait_phase(chart_cluster, namespace, EXAMPLE_JOB, "Succeeded")
        assert "Running" in seen
        wait_phase(chart_cluster, namespace, "qwen2-7b-reference", "Succeeded", timeout=180)
        # The converter ran to completion under the chart's RBAC (a short Exporting phase may finish
        # between two polls, so its result is read, not the phases seen).
        reference = get(chart_cluster, "grpojob", "qwen2-7b-reference", "-n", namespace)
        assert condition(reference, "Exported")["reason"] == "ConverterSucceeded", reference["status"]
        assert get(chart_cluster, "job", "qwen2-7b-reference-export", "-n", namespace)["status"].get("succeeded") == 1
        # The trainer's Role was created by the operator: RBAC let it grant what it holds.
        assert get(chart_cluster, "role", "-n", namespace, "-l", f"grpo.dev/job={EXAMPLE_JOB}")["items"]
        # So was the job's NetworkPolicy, admitting the release's operator pods (the chart's env names them).
        ingress = get(chart_cluster, "networkpolicy", EXAMPLE_JOB, "-n", namespace)["spec"]["ingress"]
        selector = get(chart_cluster, "deployment", release.fullname, "-n", release.namespace)["spec"]["selector"]
        assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": release.namespace}},
                "podSelector": selector} in [peer for rule in ingress for peer in rule.get("from", [])]
        wait_event(chart_cluster, namespace, EXAMPLE_JOB, "Created", kind=None)
        # Leader election works under the chart's RBAC: the operator holds the release's Lease.
        lease = get(chart_cluster, "lease", release.fullname, "-n", release.namespace)
        assert lease["spec"]["holderIdentity"] == "grpo-operator-out-of-cluster"
    assert forbidden_lines(operator.log) == []


@pytest.mark.parametrize(("request_", "allowed"), [
    (("get", "secrets", "-n", "kube-system"), False),
    (("list", "secrets", "-n", "team-chart"), False),
    (("create", "clusterrolebindings"), False),
    (("escalate", "roles.rbac.authorization.k8s.io", "-n", "team-chart"), False),
    (("bind", "roles.rbac.authorization.k8s.io", "-n", "team-chart"), False),
    (("delete", "grpojobs.grpo.dev", "-n", "team-chart"), False),
    (("delete", "persistentvolumeclaims", "-n", "team-chart"), False),
    (("delete", "configmaps", "-n", "team-chart"), True),  # the verl ConfigMap, replaced before training
    (("delete", "jobs.batch", "-n", "team-chart"), True),  # the preflight Job, likewise
    (("delete", "rayjobs.ray.io", "-n", "team-chart"), True),  # an attempt a guardrail rolls back or suspends
    (("get", "nodes"), False),
    (("list", "nodes"), True),
    (("create", "pods", "-n", "team-chart"), False),
    (("watch", "grpojobs.grpo.dev", "--all-namespaces"), True),
    # The waiting check's looks after the first: the changes since (runtime/delta_list.py).
    (("watch", "persistentvolumeclaims", "-n", "team-chart"), True),
    (("watch", "events", "-n", "team-chart"), True),
    (("create", "rayjobs.ray.io", "-n", "team-chart"), True),
    (("create", "networkpolicies.networking.k8s.io", "-n", "team-chart"), True),  # one per job
    (("delete", "networkpolicies.networking.k8s.io", "-n", "team-chart"), False),  # goes with its GRPOJob
    # The GRPOJob CRD's version label (grpo_operator/crd_check.py), and no other CRD by name.
    (("get", "customresourcedefinitions.apiextensions.k8s.io/grpojobs.grpo.dev"), True),
    (("get", "customresourcedefinitions.apiextensions.k8s.io/rayclusters.ray.io"), False),
    # The leader Lease: this one, in the release's namespace, and no other.
    (("update", f"leases.coordination.k8s.io/{RELEASE}-grpo-operator", "-n", RELEASE_NAMESPACE), True),
    (("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system"), False),
    (("update", "leases.coordination.k8s.io/someone-else", "-n", RELEASE_NAMESPACE), False),
    (("delete", f"leases.coordination.k8s.io/{RELEASE}-grpo-operator", "-n", RELEASE_NAMESPACE), False),
    (("patch", f"clusterkopfpeerings.kopf.dev/{RELEASE}-grpo-operator"), False),  # no peering with a Lease
])
def test_chart_rbac_allows_only_what_the_operator_does(
        chart_cluster: LocalCluster, release: Release, request_: tuple[str, ...], allowed: bool) -> None:
    assert can_i(chart_cluster, release, *request_) is allowed


def test_chart_service_account_token_is_refused_secrets(
        chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    kubeconfig = token_kubeconfig(chart_cluster, release, tmp_path / "kubeconfig")
    result = subprocess.run([str(chart_cluster.kubectl_path), f"--kubeconfig={kubeconfig}",
                             "get", "secrets", "-n", "kube-system"], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "forbidden" in result.stderr.lower()
    allowed = subprocess.run([str(chart_cluster.kubectl_path), f"--kubeconfig={kubeconfig}",
                              "get", "grpojobs", "-A"], capture_output=True, text=True, timeout=30)
    assert allowed.returncode == 0, allowed.stderr  # the same token works where the chart grants access


# --------------------------------------------------------------------------- users' RBAC


def as_user(cluster: LocalCluster, user: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """kubectl as `user`, impersonated by the cluster's admin: what that person's own credentials would get."""
    return cluster.kubectl(*args, f"--as={user}", input=input, check=False)


def can_user(cluster: LocalCluster, user: str, *request: str) -> str:
    """`kubectl auth can-i`'s answer, "yes" or "no" (anything else is a failure to ask)."""
    return as_user(cluster, user, "auth", "can-i", *request).stdout.strip()


def refused(result: subprocess.CompletedProcess, user: str, verb: str, resource: str) -> bool:
    """Refused by RBAC, for that user, verb and resource, not for any other reason (a bad body, a typo)."""
    return result.returncode != 0 and f'User "{user}" cannot {verb} resource "{resource}"' in result.stderr


def set_user_roles(cluster: LocalCluster, release: Release, enabled: bool) -> None:
    helm(cluster, "upgrade", release.name, str(CHART), "-n", release.namespace, "--reuse-values", "--wait",
         "--set", f"rbac.aggregateToDefaultRoles={str(enabled).lower()}")


def test_edit_and_view_get_grpojob_rights_from_the_chart_and_no_secrets(
        chart_cluster: LocalCluster, release: Release) -> None:
    cluster = chart_cluster
    namespace = create_namespace(cluster, "team-users")
    job = example(EXAMPLE)
    name, other = job["metadata"]["name"], {**job, "metadata": {"name": "bobs-job"}}

    def alice_may_create() -> str:
        return can_user(cluster, "alice", "create", "grpojobs.grpo.dev", "-n", namespace)

    switched_off = False
    try:
        cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", namespace)
        cluster.kubectl("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", namespace)
        # Where KubeRay would keep a job's Ray token.
        cluster.kubectl("create", "secret", "generic", "ray-token", "--from-literal=token=t", "-n", namespace)

        # Without the chart's aggregated roles the same bindings give no GRPOJob rights: they come from the chart.
        set_user_roles(cluster, release, enabled=False)
        switched_off = True
        wait_for("edit without the chart's roles to refuse GRPOJobs", lambda: alice_may_create() == "no")
        assert refused(as_user(cluster, "alice", "create", "-n", namespace, "-f", "-", input=json.dumps(job)),
                       "alice", "create", "grpojobs")
        # ...while edit reads Secrets all the same: Kubernetes' own rule, which the chart adds nothing to.
        edit_rules = get(cluster, "clusterrole", "edit")["rules"]
        assert any("" in r["apiGroups"] and "secrets" in r["resources"] and "get" in r["verbs"] for r in edit_rules)
        assert as_user(cluster, "alice", "get", "secret", "ray-token", "-n", namespace).returncode == 0

        set_user_roles(cluster, release, enabled=True)
        switched_off = False
        wait_for("edit to create GRPOJobs through the chart's roles", lambda: alice_may_create() == "yes")
        created = as_user(cluster, "alice", "create", "-n", namespace, "-f", "-", input=json.dumps(job))
        assert created.returncode == 0, created.stderr
        patch = ("patch", "grpojob", name, "-n", namespace, "--type=merge", "-p")
        patched = as_user(cluster, "alice", *patch, '{"metadata":{"labels":{"owner":"alice"}}}')
        assert patched.returncode == 0, patched.stderr

        # view reads GRPOJobs and their status, and changes nothing.
        assert as_user(cluster, "bob", "get", "grpojob", name, "-n", namespace).returncode == 0
        listed = as_user(cluster, "bob", "get", "grpojobs", "-n", namespace, "-o", "name")
        assert listed.stdout.split() == [f"grpojob.grpo.dev/{name}"], listed.stderr
        status = as_user(cluster, "bob", "get", "grpojob", name, "-n", namespace, "--subresource=status")
        assert status.returncode == 0, status.stderr
        assert refused(as_user(cluster, "bob", "create", "-n", namespace, "-f", "-", input=json.dumps(other)),
                       "bob", "create", "grpojobs")
        assert refused(as_user(cluster, "bob", *patch, '{"metadata":{"labels":{"owner":"bob"}}}'),
                       "bob", "patch", "grpojobs")
        assert refused(as_user(cluster, "bob", "delete", "grpojob", name, "-n", namespace, "--wait=false"),
                       "bob", "delete", "grpojobs")
        assert refused(as_user(cluster, "bob", "get", "secret", "ray-token", "-n", namespace),
                       "bob", "get", "secrets")

        deleted = as_user(cluster, "alice", "delete", "grpojob", name, "-n", namespace, "--wait=false")
        assert deleted.returncode == 0, deleted.stderr
    finally:
        if switched_off:  # the module's release as it was installed, for the tests after this one
            set_user_roles(cluster, release, enabled=True)
        delete_namespace(cluster, namespace, wait_for_jobs=True)


def test_single_namespace_mode_reconciles_there_and_is_refused_elsewhere(
        chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    namespace = team_namespace(chart_cluster, "team-scoped")
    scoped = install(chart_cluster, "scoped", "grpo-scoped", "watchNamespaces={team-scoped}")
    try:
        # Cluster-wide it may only list nodes (the capacity condition, the GPUs' memory for the preflight) and read the
        # GRPORuntimes and namespaces' labels (the defaults jobs take, their Pod Security level).
        # (The users' aggregated ClusterRoles are no rights of the operator's: left out.)
        cluster_roles = get(chart_cluster, "clusterrole", "-l",
                            "app.kubernetes.io/instance=scoped,app.kubernetes.io/component!=user-rbac")["items"]
        assert [r["rules"] for r in cluster_roles] == [
            [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
             {"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["list"]}],
            [{"apiGroups": ["grpo.dev"], "resources": ["grporuntimes"], "verbs": ["list", "watch"]},
             {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]]
        assert can_i(chart_cluster, scoped, "list", "nodes")
        assert not can_i(chart_cluster, scoped, "list", "grpojobs.grpo.dev", "-n", "team-chart")
        assert not can_i(chart_cluster, scoped, "list", "namespaces")
        assert can_i(chart_cluster, scoped, "list", "grpojobs.grpo.dev", "-n", namespace)
        # The cluster-wide release must not reconcile this job too: only the scoped operator runs now.
        with operator_as(chart_cluster, scoped, tmp_path) as operator:
            apply_job(chart_cluster, namespace, example(EXAMPLE))
            wait_phase(chart_cluster, namespace, EXAMPLE_JOB, "Succeeded")
        assert forbidden_lines(operator.log) == []
    finally:  # its cluster-wide objects (the admission policy) must not outlive the test, failed or not
        helm(chart_cluster, "uninstall", "scoped", "-n", "grpo-scoped", "--wait", check=False)
        chart_cluster.api.delete("namespaces", "grpo-scoped")


# --------------------------------------------------------------------------- Prometheus


def operator_scrape(metrics_port: int) -> list[dict]:
    """Scrape only the operator on loopback, keeping its own `namespace` labels as the ServiceMonitor does."""
    return [{
        "job_name": "grpo-operator",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
    }]


def test_prometheus_scrapes_job_phases_from_the_operator(
        chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    namespace = team_namespace(chart_cluster, "team-metrics")
    with operator_as(chart_cluster, release, tmp_path) as operator:
        apply_job(chart_cluster, namespace, example(EXAMPLE))
        wait_phase(chart_cluster, namespace, EXAMPLE_JOB, "Succeeded")
        with prometheus(tmp_path, operator_scrape(operator.metrics_port), [RULES]) as prom:
            succeeded = wait_for(
                "Prometheus to return the job's phase",
                lambda: prom.query(f'grpo_operator_job_phase{{namespace="{namespace}",grpojob="{EXAMPLE_JOB}"}}'),
                timeout=60)
            by_phase = {r["metric"]["phase"]: float(r["value"][1]) for r in prom.query("grpo_operator_jobs")}
            failed_here = prom.query(f'grpo_operator_job_phase{{namespace="{namespace}",phase="Failed"}} == 1')
            coef = prom.query(f'grpo_operator_job_kl_coef{{namespace="{namespace}",grpojob="{EXAMPLE_JOB}"}}')
            groups = {g["name"]: [r["name"] for r in g["rules"]] for g in prom.rule_groups()}
    assert [(r["metric"]["phase"], r["value"][1]) for r in succeeded] == [("Succeeded", "1")]
    # Cluster-wide counts include the session's other jobs; this namespace's job never failed.
    assert by_phase["Succeeded"] >= 1 and not failed_here
    assert [float(r["value"][1]) for r in coef] == [0.001]  # the CRD's default klLoss.coef
    assert set(groups) == {"grpo-training", "grpo-operator"}  # the shipped rules load in real Prometheus
    assert "GRPOJobRolloutStalled" in groups["grpo-training"]


def test_failed_job_fires_its_alert_in_real_prometheus(
        chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    namespace = team_namespace(chart_cluster, "team-alerts")
    set_ray_outcome(chart_cluster, namespace, EXAMPLE_JOB, "FAILED", "vLLM engine died: CUDA out of memory")
    with operator_as(chart_cluster, release, tmp_path) as operator:
        apply_job(chart_cluster, namespace, example(EXAMPLE))
        wait_phase(chart_cluster, namespace, EXAMPLE_JOB, "Failed")
        with prometheus(tmp_path, operator_scrape(operator.metrics_port), [RULES]) as prom:
            firing = wait_for("GRPOJobFailed to fire", lambda: prom.query(
                'ALERTS{alertname="GRPOJobFailed",alertstate="firing"}'), timeout=60)
    assert [(a["metric"]["namespace"], a["metric"]["grpojob"], a["metric"]["severity"]) for a in firing] == [
        (namespace, EXAMPLE_JOB, "critical")]


# --------------------------------------------------------------------------- helm test


def test_helm_test_passes_on_a_working_install(chart_cluster: LocalCluster, release: Release, tmp_path: Path) -> None:
    # KWOK plays the pods, so `helm test` proves the check is admitted (restricted) and run to completion...
    tested = helm(chart_cluster, "test", release.name, "-n", release.namespace, "--timeout", "120s", check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "install-check" in tested.stdout and "Succeeded" in tested.stdout
    check = get(chart_cluster, "job", f"{release.fullname}-install-check", "-n", release.namespace)
    command = check["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "grpo_operator.selftest"]
    # ...and its command, run here against a real operator as the chart runs it, is what decides.
    with operator_as(chart_cluster, release, tmp_path) as operator:
        passed = selftest(operator.metrics_url)
    assert passed.returncode == 0, passed.stdout
    assert "ok: grpo-operator 0.1.0" in passed.stdout
    wait_for("no helm test pod left failing", lambda: all(
        p["status"].get("phase") == "Succeeded" for p in items(
            chart_cluster, "pods", "-n", release.namespace, "-l", "app.kubernetes.io/component=install-check")))
