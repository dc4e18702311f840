"""The chart, rendered offline by the real helm: lint, every toggle, the schema, and what each object promises."""

from __future__ import annotations

import json
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_devcluster.build import binary
from grpo_devcluster.components import HELM, KUBERNETES_VERSION
from grpo_operator import __version__
from grpo_operator.api import GRPOJobSpec
from grpo_operator.crd import VERSION_LABEL, build_crd
from grpo_operator.plan import METRICS_PORT, plan
from grpo_operator.render.common import JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.render.network_policy import NetworkPeers, OperatorIdentity
from grpo_operator.render.rayjob import HEAD_PORTS
from grpo_operator.render.rbac import render_trainer_rbac
from grpo_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "grpo-operator"
TOGGLES = ("serviceMonitor.enabled", "podMonitor.enabled", "prometheusRule.enabled", "grafanaDashboard.enabled")
ALL_ON = [f"{t}=true" for t in TOGGLES]
NAMESPACED = ["watchNamespaces={team-a,team-b}"]
# One replica without leader election (kopf peering or standalone), as before the chart elected a leader.
SINGLE = ["operator.leaderElection.enabled=false", "replicaCount=1"]
# `helm template` checks the chart's kubeVersion against the Kubernetes its build names; ours is built without
# helm's version stamps and names v1.20.0, so every render names the Kubernetes the e2e tier runs.
KUBE_VERSION = KUBERNETES_VERSION
USER_RBAC = "user-rbac"  # app.kubernetes.io/component of the users' ClusterRoles (templates/user-rbac.yaml)


@cache
def _helm() -> str:
    return str(binary(HELM, "helm"))


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_helm(), *args], capture_output=True, text=True, timeout=60, check=False)


def _set(values: list[str] | tuple[str, ...]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


@cache
def _render(values: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    result = helm("template", "grpo", str(CHART), "--namespace", "grpo-system", "--kube-version", KUBE_VERSION,
                  *_set(values))
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(*values: str) -> list[dict[str, Any]]:
    return list(_render(tuple(values)))


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


# --------------------------------------------------------------------------- lint, toggles, schema


@pytest.mark.parametrize("values", [[], *[[f"{t}=true"] for t in TOGGLES], ALL_ON, NAMESPACED + ALL_ON],
                         ids=["defaults", *TOGGLES, "all-toggles", "namespaced+all"])
def test_helm_lint_is_clean(values: list[str]) -> None:
    result = helm("lint", "--strict", str(CHART), *_set(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_defaults_render_the_operator_and_no_monitoring_objects() -> None:
    # The Jobs are `helm test`'s install check and trainer check (hooks: created only by `helm test`).
    # Five ClusterRoles: the operator's, its nodes', its runtimes' and namespaces', and the users' edit and view
    # (user-rbac.yaml). The Role, its binding and the PodDisruptionBudget: the leader Lease's rights and the two
    # replicas' budget.
    assert kinds(render()) == ["ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole",
                               "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding", "Deployment",
                               "Job", "Job",
                               "PodDisruptionBudget",
                               "Role", "RoleBinding", "Service", "ServiceAccount"]


def _job(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "Job"
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    return found


def test_helm_test_reads_the_operators_metrics_as_a_restricted_pod_without_credentials() -> None:
    docs = render()
    check = _job(docs, "install-check")
    assert check["metadata"]["annotations"]["helm.sh/hook"] == "test"
    pod = check["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == [
        "python", "-m", "grpo_operator.selftest",
        "--metrics-url=http://grpo-grpo-operator-metrics.grpo-system.svc:8080/metrics", "--version=0.1.0"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # Neither the Deployment nor the metrics Service may take the check's pod for the operator.
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= pod["metadata"]["labels"].items()
    assert not one(docs, "Service")["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert not [d for d in render("metrics.service.enabled=false") if d["kind"] == "Job"
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "install-check"]


def test_helm_test_pulls_and_starts_the_default_trainer_image_unless_turned_off() -> None:
    docs = render("operator.defaultTrainerImage=registry.example.com/grpo-trainer:0.1.0",
                  "imagePullSecrets[0].name=regcred")
    check = _job(docs, "trainer-check")
    assert check["metadata"]["annotations"]["helm.sh/hook"] == "test"
    pod = check["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (container["image"], container["command"]) == ("registry.example.com/grpo-trainer:0.1.0",
                                                           ["grpo-train", "--help"])
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] == 1000  # the trainer image's own user
    assert not [d for d in render("helmTest.trainerCheck=false") if d["kind"] == "Job"
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer-check"]


@pytest.mark.parametrize(("toggle", "kind"), [
    ("serviceMonitor.enabled", "ServiceMonitor"),
    ("podMonitor.enabled", "PodMonitor"),
    ("prometheusRule.enabled", "PrometheusRule"),
    ("grafanaDashboard.enabled", "ConfigMap"),
])
def test_each_toggle_adds_exactly_its_object(toggle: str, kind: str) -> None:
    assert kinds(render(f"{toggle}=true")) == sorted([*kinds(render()), kind])


@pytest.mark.parametrize(("value", "named"), [
    ("metrics.port=abc", "/metrics/port"),
    ("watchNamespaces=team-a", "/watchNamespaces"),
    ("operator.peering.enabled=yes", "/operator/peering/enabled"),
    ("serviceMonitor.interval=often", "/serviceMonitor/interval"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("operator.dependencyRetrySeconds=-1", "/operator/dependencyRetrySeconds"),
    ("operatr.verbose=true", "operatr"),
    ("rbac.aggregateToDefaultRoles=maybe", "/rbac/aggregateToDefaultRoles"),
    # A number where Kubernetes wants a string: refused here, naming it, not by the apiserver's decoder.
    ("extraEnv[0].name=GRPO_OPERATOR_MAX_JOBS_IN_FLIGHT,extraEnv[0].value=16", "/extraEnv/0/value"),
])
def test_schema_refuses_a_wrong_value_naming_it(value: str, named: str) -> None:
    for command in (["template", "grpo", "--kube-version", KUBE_VERSION], ["lint", "--strict"]):
        result = helm(*command, str(CHART), "--set", value)
        assert result.returncode != 0, f"helm {command[0]} accepted {value}"
        assert named in result.stdout + result.stderr


def test_chart_crd_is_the_generated_crd() -> None:
    assert (CHART / "crds" / "grpojob.yaml").read_bytes() == (ROOT / "crds" / "grpojob.yaml").read_bytes(), (
        "charts/grpo-operator/crds/grpojob.yaml differs from crds/grpojob.yaml: copy the generated file over")


# --------------------------------------------------------------------------- Deployment


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_deployment_is_two_replicas_electing_a_leader_kept_through_drains() -> None:
    docs = render()
    spec = one(docs, "Deployment")["spec"]
    assert spec["replicas"] == 2
    # One pod at a time, never a surge: the Lease, not the rollout, decides who reconciles.
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert "--leader-elect=grpo-grpo-operator" in _container(docs)["args"]
    budget = one(docs, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_without_leader_election_one_replica_is_replaced_by_recreate() -> None:
    docs = render(*SINGLE)
    spec = one(docs, "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert "PodDisruptionBudget" not in kinds(docs)
    assert not [a for a in _container(docs)["args"] if a.startswith("--leader-elect")]


def test_two_replicas_without_leader_election_are_refused() -> None:
    result = helm("template", "grpo", str(CHART), "--kube-version", KUBE_VERSION, "--set", "replicaCount=2",
                  "--set", "operator.leaderElection.enabled=false")
    assert result.returncode != 0
    assert "replicaCount: more than one replica needs operator.leaderElection.enabled=true" in result.stderr


def test_deployment_meets_restricted_pod_security() -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}


def test_liveness_and_readiness_probes_target_the_operators_health_endpoints() -> None:
    container = _container(render("liveness.port=9091"))
    assert "--liveness=http://0.0.0.0:9091" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], ports[get["port"]]) == (path, 9091)


def test_peering_toggle_picks_peering_or_standalone_without_leader_election() -> None:
    assert "--peering=grpo-grpo-operator" in _container(render(*SINGLE))["args"]
    assert "--standalone" in _container(render(*SINGLE, "operator.peering.enabled=false"))["args"]
    assert "ClusterKopfPeering" not in kinds(render(*SINGLE, "operator.peering.enabled=false"))
    # With leader election kopf runs standalone on the leader: no peering object, no rights to one.
    assert "ClusterKopfPeering" not in kinds(render())
    assert not _grants(_rules(render(), "ClusterRole"), "kopf.dev", "clusterkopfpeerings", "patch",
                       "grpo-grpo-operator")


def test_operator_pod_gives_kopf_its_pod_name_as_identity() -> None:
    # Without POD_ID kopf calls getpass.getuser(), which raises as uid 65532 with no passwd entry.
    env = {e["name"]: e for e in _container(render())["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_deployment_env_is_read_by_the_operator_settings() -> None:
    container = _container(render("operator.defaultTrainerImage=registry.example/trainer:1.2",
                                  "operator.dependencyRetrySeconds=7", "metrics.port=9100", *NAMESPACED))
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = OperatorSettings.from_env(env)
    # The chart's networkPolicy defaults are the operator's own; the chart adds the operator's pods.
    operator_pods = OperatorIdentity("grpo-system", one(render(), "Deployment")["spec"]["selector"]["matchLabels"])
    assert settings == OperatorSettings(default_trainer_image="registry.example/trainer:1.2",
                                        namespaces=("team-a", "team-b"), metrics_host="0.0.0.0",
                                        metrics_port=9100, dependency_retry_seconds=7.0,
                                        network_policy=NetworkPeers(operator=operator_pods))
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == 9100


def render_values(tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The chart rendered with a values file, as users write one (`--set` would turn "16" into a number)."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "grpo", str(CHART), "--namespace", "grpo-system", "--kube-version", KUBE_VERSION,
                  "-f", str(path))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_extra_env_reaches_the_operator_settings_after_the_charts_own(tmp_path: Path) -> None:
    extra = [{"name": "GRPO_OPERATOR_MAX_JOBS_IN_FLIGHT", "value": "16"},
             {"name": "GRPO_OPERATOR_DEPENDENCY_RETRY_SECONDS", "value": "5"},
             {"name": "HTTPS_PROXY", "valueFrom": {"configMapKeyRef": {"name": "proxy", "key": "url"}}}]
    env = _container(render_values(tmp_path, {"extraEnv": extra}))["env"]
    assert env[-len(extra):] == extra  # as written, valueFrom included
    # Appended: the kubelet keeps a name's last value, so an entry naming a chart-set variable replaces it.
    values = {e["name"]: e["value"] for e in env if "value" in e}
    settings = OperatorSettings.from_env(values)
    assert (settings.max_jobs_in_flight, settings.dependency_retry_seconds) == (16, 5.0)
    own = {e["name"] for e in _container(render())["env"]}
    assert "GRPO_OPERATOR_DEPENDENCY_RETRY_SECONDS" in own and "GRPO_OPERATOR_MAX_JOBS_IN_FLIGHT" not in own


# --------------------------------------------------------------------------- RBAC


@pytest.fixture
def colocated_role() -> dict[str, Any]:
    """The Role the operator creates for the example job's trainer."""
    body = yaml.safe_load((ROOT / "examples" / "colocated-length.yaml").read_text())
    spec = GRPOJobSpec.model_validate(body["spec"])
    job_plan = plan(spec, name=body["metadata"]["name"], namespace="team-a", default_image="trainer:test")
    return next(o for o in render_trainer_rbac(spec, job_plan) if o["kind"] == "Role")


def _operators_own(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects without the users' aggregated ClusterRoles, which are no rights of the operator's."""
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != USER_RBAC]


def _rules(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operator's rules in objects of `kind`."""
    return [rule for d in _operators_own(docs) if d["kind"] == kind for rule in d["rules"]]


def _grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               and (not r.get("resourceNames") or name in r["resourceNames"]) for r in rules)


@pytest.mark.parametrize(("values", "kind"), [((), "ClusterRole"), (tuple(NAMESPACED), "Role")])
def test_rbac_never_grants_secrets_wildcards_or_escalation(values: tuple[str, ...], kind: str) -> None:
    rules = _rules(render(*values), kind)
    assert rules
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert "secrets" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
        # delete only what is replaced: the verl ConfigMap and the preflight Job before training starts, the
        # RayJob of an attempt a guardrail rolls back or suspends. Never a PVC (checkpoints) or a GRPOJob.
        if "delete" in rule["verbs"]:
            assert rule["resources"] in (["configmaps"], ["jobs"], ["rayjobs"]), rule


@pytest.mark.parametrize(("values", "kind"), [((), "ClusterRole"), (tuple(NAMESPACED), "Role")])
def test_rbac_lets_the_waiting_check_watch_what_it_lists(values: tuple[str, ...], kind: str) -> None:
    """Each look at a namespace's claims and Events after the first is a watch for the changes since
    (runtime/delta_list.py): without `watch` it is refused, and every look lists the whole namespace again."""
    rules = _rules(render(*values), kind)
    for resource in ("persistentvolumeclaims", "events"):
        assert _grants(rules, "", resource, "list") and _grants(rules, "", resource, "watch"), resource


def test_nodes_are_only_listed_and_only_while_rbac_nodes_is_on() -> None:
    rules = [r for d in render() if d["kind"] == "ClusterRole" for r in d["rules"] if "nodes" in r["resources"]]
    assert rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    assert not [d for d in render("rbac.nodes=false") if d["metadata"]["name"].endswith("-nodes")]


@pytest.mark.parametrize(("values", "kind"), [((), "ClusterRole"), (tuple(NAMESPACED), "Role")])
def test_rbac_holds_what_the_trainer_role_grants(colocated_role: dict[str, Any], values: tuple[str, ...],
                                                 kind: str) -> None:
    """The apiserver lets the operator create the trainer's Role only if it holds every verb in it."""
    rules = _rules(render(*values), kind)
    for rule in colocated_role["rules"]:
        for verb in rule["verbs"]:
            for resource in rule["resources"]:
                assert _grants(rules, rule["apiGroups"][0], resource, verb), (resource, verb)


def test_namespaced_mode_has_a_role_per_namespace_and_reads_only_nodes_and_runtimes_cluster_wide() -> None:
    docs = _operators_own(render(*NAMESPACED))
    cluster_wide = [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering")]
    assert {d["metadata"]["name"] for d in cluster_wide} == {"grpo-grpo-operator-nodes", "grpo-grpo-operator-runtimes"}
    runtimes = next(d for d in cluster_wide
                    if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-runtimes"))
    assert runtimes["rules"] == [
        {"apiGroups": ["grpo.dev"], "resources": ["grporuntimes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    ]
    assert not {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"} & set(kinds(_operators_own(
        render(*NAMESPACED, "rbac.nodes=false", "rbac.runtimes=false"))))
    jobs_rbac = [d for d in docs if not d["metadata"]["name"].endswith("-leader-election")]  # the Lease's own
    for kind in ("Role", "RoleBinding"):
        assert sorted(d["metadata"]["namespace"] for d in jobs_rbac if d["kind"] == kind) == ["team-a", "team-b"]
    peerings = render(*NAMESPACED, *SINGLE)
    assert sorted(d["metadata"]["namespace"] for d in peerings if d["kind"] == "KopfPeering") == ["team-a", "team-b"]
    binding = next(d for d in jobs_rbac if d["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "grpo-grpo-operator",
                                    "namespace": "grpo-system"}]


@pytest.mark.parametrize("timing", [("retryPeriodSeconds=20",), ("renewDeadlineSeconds=30",),
                                    ("leaseDurationSeconds=5", "renewDeadlineSeconds=5")])
def test_lease_timings_that_could_overlap_two_leaders_are_refused(timing: tuple[str, ...]) -> None:
    result = helm("template", "grpo", str(CHART), "--kube-version", KUBE_VERSION,
                  *_set([f"operator.leaderElection.{t}" for t in timing]))
    assert result.returncode != 0
    assert "needs retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds" in result.stderr


def test_lease_rights_are_pinned_to_the_release_lease_in_its_namespace() -> None:
    role = next(d for d in render() if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election"))
    assert role["metadata"]["namespace"] == "grpo-system"
    rules = role["rules"]
    assert _grants(rules, "coordination.k8s.io", "leases", "update", "grpo-grpo-operator")
    assert not _grants(rules, "coordination.k8s.io", "leases", "update", "another-lease")
    assert not _grants(rules, "coordination.k8s.io", "leases", "delete", "grpo-grpo-operator")
    assert "Role" not in kinds(render(*SINGLE))


def test_peering_rights_are_pinned_to_the_release_peering_object() -> None:
    rules = _rules(render(*SINGLE), "ClusterRole")
    assert _grants(rules, "kopf.dev", "clusterkopfpeerings", "patch", "grpo-grpo-operator")
    assert not _grants(rules, "kopf.dev", "clusterkopfpeerings", "patch", "another-operator")


def _user_roles(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The users' aggregated ClusterRoles by the suffix of their name (edit, view)."""
    return {d["metadata"]["name"].rsplit("-", 1)[-1]: d for d in docs
            if d["kind"] == "ClusterRole" and d["metadata"]["labels"].get("app.kubernetes.io/component") == USER_RBAC}


def _aggregated_into(role: dict[str, Any]) -> set[str]:
    prefix = "rbac.authorization.k8s.io/aggregate-to-"
    labels = role["metadata"]["labels"]
    return {k.removeprefix(prefix) for k, v in labels.items() if k.startswith(prefix) and v == "true"}


def test_users_edit_and_view_grpojobs_through_kubernetes_own_roles() -> None:
    roles = _user_roles(render())
    assert set(roles) == {"edit", "view"}
    assert _aggregated_into(roles["edit"]) == {"admin", "edit"}
    assert _aggregated_into(roles["view"]) == {"view"}
    edit, view = roles["edit"]["rules"], roles["view"]["rules"]
    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert _grants(edit, "grpo.dev", "grpojobs", verb), verb
    for verb in ("get", "list", "watch"):
        assert _grants(view, "grpo.dev", "grpojobs", verb), verb
    assert not {"create", "update", "patch", "delete", "deletecollection"} & {v for r in view for v in r["verbs"]}
    for rules in (edit, view):
        # The status is the operator's and the trainer's: readable, never written by people.
        assert _grants(rules, "grpo.dev", "grpojobs/status", "get")
        assert not any(_grants(rules, "grpo.dev", "grpojobs/status", verb) for verb in ("update", "patch"))
        # Only GRPOJobs: a job's Ray token Secret stays with the roles that read Secrets already.
        assert {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]} == {
            ("grpo.dev", "grpojobs"), ("grpo.dev", "grpojobs/status")}


@pytest.mark.parametrize(("values", "present"), [
    ((), True),
    (tuple(NAMESPACED), True),  # users' rights follow the CRD, which is cluster-wide in either mode
    (("rbac.aggregateToDefaultRoles=false",), False),
    (("rbac.create=false",), False),
])
def test_users_roles_follow_their_switch_and_rbac_create(values: tuple[str, ...], present: bool) -> None:
    assert bool(_user_roles(render(*values))) is present


# --------------------------------------------------------------------------- versions


def test_the_chart_the_package_and_the_crd_carry_the_operators_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"] == __version__
    assert build_crd()["metadata"]["labels"][VERSION_LABEL] == __version__
    assert one(render(), "Deployment")["metadata"]["labels"]["app.kubernetes.io/version"] == __version__


@pytest.mark.parametrize(("kube_version", "installs"), [
    ("v1.29.0", True),
    ("v1.30.2-gke.1", True),  # a vendor build: a pre-release to semver, admitted by the floor's "-0"
    ("v1.28.15", False),  # CRD validation rules are beta there, and can be off
])
def test_kube_version_floor_is_1_29_vendor_builds_included(kube_version: str, installs: bool) -> None:
    result = helm("template", "grpo", str(CHART), "--kube-version", kube_version)
    assert (result.returncode == 0) is installs, result.stderr
    if not installs:
        assert "requires kubeVersion: >=1.29.0-0" in result.stderr


# --------------------------------------------------------------------------- monitoring


def test_prometheus_rule_ships_the_promtool_tested_file() -> None:
    rule = one(render("prometheusRule.enabled=true", "prometheusRule.labels.release=kps"), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_runbook_links_become_absolute_with_a_base_url() -> None:
    base = "https://git.example.com/ml/grpo-operator/blob/v0.1.0/docs/runbooks.md"
    rule = one(render("prometheusRule.enabled=true", f"prometheusRule.runbookBaseURL={base}"), "PrometheusRule")
    urls = {r["alert"]: r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert urls["GRPOJobKLRising"] == f"{base}#grpojobklrising"
    assert all(url.startswith(f"{base}#") for url in urls.values())
    # Everything else is still the promtool-tested file.
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    for group in (rule["spec"], shipped):
        for g in group["groups"]:
            for r in g["rules"]:
                r["annotations"].pop("runbook_url")
    assert rule["spec"] == shipped


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar() -> None:
    cm = one(render("grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring"), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    dashboard = json.loads(next(iter(cm["data"].values())))
    assert dashboard == json.loads((CHART / "files" / "grafana-dashboard.json").read_text())


def test_pod_monitor_selects_the_head_pods_metrics_port() -> None:
    monitor = one(render("podMonitor.enabled=true"), "PodMonitor")["spec"]
    assert monitor["selector"]["matchLabels"] == {MANAGED_BY: OPERATOR_NAME, "ray.io/node-type": "head"}
    assert monitor["namespaceSelector"] == {"any": True}
    endpoint = monitor["podMetricsEndpoints"][0]
    head_ports = {p["name"]: p["containerPort"] for p in HEAD_PORTS}
    assert head_ports[endpoint["port"]] == METRICS_PORT
    # Prometheus exposes pod label grpo.dev/job as __meta_kubernetes_pod_label_grpo_dev_job.
    sanitized = "__meta_kubernetes_pod_label_" + JOB_LABEL.replace(".", "_").replace("/", "_")
    assert {"sourceLabels": [sanitized], "targetLabel": "grpojob"} in endpoint["relabelings"]


def test_pod_monitor_follows_watched_namespaces() -> None:
    monitor = one(render("podMonitor.enabled=true", *NAMESPACED), "PodMonitor")["spec"]
    assert monitor["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_service_monitor_selects_the_metrics_service_and_keeps_job_namespaces() -> None:
    docs = render("serviceMonitor.enabled=true")
    monitor, service = one(docs, "ServiceMonitor")["spec"], one(docs, "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["endpoints"][0]["honorLabels"] is True


def test_service_monitor_without_the_service_is_refused() -> None:
    result = helm("template", "grpo", str(CHART), "--kube-version", KUBE_VERSION,
                  *_set(["serviceMonitor.enabled=true", "metrics.service.enabled=false"]))
    assert result.returncode != 0 and "metrics.service.enabled" in result.stderr



def test_the_pod_security_admission_policy_is_rendered_only_where_the_api_is_served() -> None:
    def policy(*args: str) -> list[dict[str, Any]]:
        result = helm("template", "grpo", str(CHART), "--namespace", "grpo-system", "--kube-version", KUBE_VERSION,
                      *args)
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d and "ValidatingAdmissionPolicy" in d["kind"]]

    served = ("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
    found = policy(*served)
    assert [d["kind"] for d in found] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert found[1]["spec"] == {"policyName": "grpo-grpo-operator-pod-security", "validationActions": ["Deny"]}
    assert found[0]["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["grpojobs"]
    assert policy() == []  # a cluster without the v1 API (Kubernetes 1.29) gets none
    assert policy(*served, "--set", "admissionPolicy.podSecurity=false") == []
