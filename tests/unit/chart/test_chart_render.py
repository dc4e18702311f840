"""The chart, rendered offline by the real helm: lint, every toggle, the schema, and what each object promises."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from grpo_devcluster.build import binary
from grpo_devcluster.components import HELM
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import METRICS_PORT, plan
from grpo_operator.render.common import JOB_LABEL, MANAGED_BY, OPERATOR_NAME
from grpo_operator.render.rayjob import HEAD_PORTS
from grpo_operator.render.rbac import render_trainer_rbac
from grpo_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "grpo-operator"
TOGGLES = ("serviceMonitor.enabled", "podMonitor.enabled", "prometheusRule.enabled", "grafanaDashboard.enabled")
ALL_ON = [f"{t}=true" for t in TOGGLES]
NAMESPACED = ["watchNamespaces={team-a,team-b}"]


@cache
def _helm() -> str:
    return str(binary(HELM, "helm"))


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_helm(), *args], capture_output=True, text=True, timeout=60, check=False)


def _set(values: list[str] | tuple[str, ...]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


@cache
def _render(values: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    result = helm("template", "grpo", str(CHART), "--namespace", "grpo-system", *_set(values))
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
    # The Job is `helm test`'s install check (a hook: created only by `helm test`).
    assert kinds(render()) == ["ClusterKopfPeering", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
                               "ClusterRoleBinding", "Deployment", "Job", "Service", "ServiceAccount"]


def test_helm_test_reads_the_operators_metrics_as_a_restricted_pod_without_credentials() -> None:
    docs = render()
    check = one(docs, "Job")
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
    assert "Job" not in kinds(render("metrics.service.enabled=false"))


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
])
def test_schema_refuses_a_wrong_value_naming_it(value: str, named: str) -> None:
    for command in (["template", "grpo"], ["lint", "--strict"]):
        result = helm(*command, str(CHART), "--set", value)
        assert result.returncode != 0, f"helm {command[0]} accepted {value}"
        assert named in result.stdout + result.stderr


def test_chart_crd_is_the_generated_crd() -> None:
    assert (CHART / "crds" / "grpojob.yaml").read_bytes() == (ROOT / "crds" / "grpojob.yaml").read_bytes(), (
        "charts/grpo-operator/crds/grpojob.yaml differs from crds/grpojob.yaml: copy the generated file over")


# --------------------------------------------------------------------------- Deployment


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_deployment_is_one_replica_replaced_by_recreate() -> None:
    spec = one(render(), "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_deployment_meets_restricted_pod_security() -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}


def test_liveness_probe_targets_the_kopf_liveness_endpoint() -> None:
    container = _container(render("liveness.port=9091"))
    assert "--liveness=http://0.0.0.0:9091/healthz" in container["args"]
    probe = container["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (probe["path"], ports[probe["port"]]) == ("/healthz", 9091)


def test_peering_toggle_picks_peering_or_standalone() -> None:
    assert "--peering=grpo-grpo-operator" in _container(render())["args"]
    assert "--standalone" in _container(render("operator.peering.enabled=false"))["args"]
    assert "ClusterKopfPeering" not in kinds(render("operator.peering.enabled=false"))


def test_operator_pod_gives_kopf_its_pod_name_as_identity() -> None:
    # Without POD_ID kopf calls getpass.getuser(), which raises as uid 65532 with no passwd entry.
    env = {e["name"]: e for e in _container(render())["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_deployment_env_is_read_by_the_operator_settings() -> None:
    container = _container(render("operator.defaultTrainerImage=registry.example/trainer:1.2",
                                  "operator.dependencyRetrySeconds=7", "metrics.port=9100", *NAMESPACED))
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = OperatorSettings.from_env(env)
    assert settings == OperatorSettings(default_trainer_image="registry.example/trainer:1.2",
                                        namespaces=("team-a", "team-b"), metrics_host="0.0.0.0",
                                        metrics_port=9100, dependency_retry_seconds=7.0)
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == 9100


# --------------------------------------------------------------------------- RBAC


@pytest.fixture
def colocated_role() -> dict[str, Any]:
    """The Role the operator creates for the example job's trainer."""
    body = yaml.safe_load((ROOT / "examples" / "colocated-length.yaml").read_text())
    spec = GRPOJobSpec.model_validate(body["spec"])
    job_plan = plan(spec, name=body["metadata"]["name"], namespace="team-a", default_image="trainer:test")
    return next(o for o in render_trainer_rbac(spec, job_plan) if o["kind"] == "Role")


def _rules(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [rule for d in docs if d["kind"] == kind for rule in d["rules"]]


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


def test_namespaced_mode_has_a_role_per_namespace_and_reads_only_nodes_cluster_wide() -> None:
    docs = render(*NAMESPACED)
    cluster_wide = [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering")]
    assert {d["metadata"]["name"] for d in cluster_wide} == {"grpo-grpo-operator-nodes"}
    assert not {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"} & set(kinds(render(*NAMESPACED,
                                                                                               "rbac.nodes=false")))
    for kind in ("Role", "RoleBinding", "KopfPeering"):
        assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == kind) == ["team-a", "team-b"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "grpo-grpo-operator",
                                    "namespace": "grpo-system"}]


def test_peering_rights_are_pinned_to_the_release_peering_object() -> None:
    rules = _rules(render(), "ClusterRole")
    assert _grants(rules, "kopf.dev", "clusterkopfpeerings", "patch", "grpo-grpo-operator")
    assert not _grants(rules, "kopf.dev", "clusterkopfpeerings", "patch", "another-operator")


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
    result = helm("template", "grpo", str(CHART), *_set(["serviceMonitor.enabled=true",
                                                          "metrics.service.enabled=false"]))
    assert result.returncode != 0 and "metrics.service.enabled" in result.stderr

