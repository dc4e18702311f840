"""Kueue on the local control plane: its configuration, its webhooks re-pointed at loopback, its queues.

Nothing here does I/O: it returns manifests, argv and PEM bytes; the caller writes, applies and starts them.
Kueue's own manifests (CRDs, webhook configurations) are read by the caller from the pinned module
(`go list -m -f {{.Dir}} sigs.k8s.io/kueue` in hack/cluster/modules/kueue) and passed in, never copied here.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from .pki import cert_name, new_key, sign

MODULE = "sigs.k8s.io/kueue"
# Inside the module directory.
CRD_BASES = "config/components/crd/bases"
WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"

API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"
# Kueue reads the namespace from the service-account mount, absent outside a pod; pinned so it never guesses.
NAMESPACE = "kueue-system"

# What each framework's webhooks are registered for. The manager answers every upstream path, a no-op for the
# frameworks left off, but each kept webhook is a call on every such object (every Pod, with the pod one) that
# fails the request whenever the manager is down (failurePolicy Fail), so only the enabled ones stay.
FRAMEWORK_RESOURCES: Mapping[str, tuple[str, str]] = {
    "batch/job": ("batch", "jobs"),
    "ray.io/rayjob": ("ray.io", "rayjobs"),
    "ray.io/raycluster": ("ray.io", "rayclusters"),
}
DEFAULT_FRAMEWORKS: tuple[str, ...] = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
# The CRDs upstream's kustomization patches to a conversion webhook (v1beta1 <-> v1beta2, v1beta2 stored).
CONVERSION_CRDS = frozenset({
    "localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io",
})

# main.go reads the metrics certificate from this fixed path whenever internal cert management is off;
# a missing file ends the manager before it starts.
METRICS_CERT_DIR = "kueue/metrics/certs"  # under /etc


@dataclass(frozen=True)
class ManagerPorts:
    """All on 127.0.0.1."""

    webhook: int
    metrics: int
    health: int


@dataclass(frozen=True)
class WebhookCerts:
    """A CA of Kueue's own: the API server trusts it for the webhooks and nothing else."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class Quota:
    cpu: str = "64"
    memory: str = "512Gi"
    gpu: int = 8
    # Anything else the queue should account for (e.g. ephemeral-storage), name -> quantity.
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]


def webhook_certs(host: str = "127.0.0.1") -> WebhookCerts:
    """The serving certificate names the IP, because the webhook URL does: a DNS-only one fails verification."""
    ca_key = new_key()
    ca_name = cert_name("grpo-devcluster-kueue-ca")
    ca = sign(ca_name, ca_key.public_key(), ca_key, ca_name, is_ca=True, usages=[])
    key = new_key()
    sans: list = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(host))]
    cert = sign(cert_name("kueue-webhook"), key.public_key(), ca_key, ca_name, is_ca=False,
                 usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)
    return WebhookCerts(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
    )


def manager_config(ports: ManagerPorts, cert_dir: Path, *, frameworks: Sequence[str] = DEFAULT_FRAMEWORKS,
                   manage_jobs_without_queue_name: bool = False,
                   managed_namespaces: Mapping[str, str] | None = None) -> dict:
    """config.kueue.x-k8s.io/v1beta2 Configuration. `cert_dir` holds tls.crt and tls.key for the webhooks."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        # One manager per cluster; a lease would only delay its start by the lease duration after a restart.
        "leaderElection": {"leaderElect": False},
        # Off: its rotator names the cert after a Service's DNS name, which the API server cannot reach here.
        "internalCertManagement": {"enable": False},
        # False: Jobs without the queue label run as if Kueue were absent, so nothing else in the cluster
        # (KubeRay's own submitter Jobs, the operator's unqueued Jobs) waits on a queue.
        "manageJobsWithoutQueueName": manage_jobs_without_queue_name,
        # Where that applies: namespaces with these labels (an admin's opt-in); everywhere Kueue's default
        # (all but kube-system and kueue-system) when None.
        **({"managedJobsNamespaceSelector": {"matchLabels": dict(managed_namespaces)}} if managed_namespaces else {}),
        "integrations": {"frameworks": list(frameworks)},
        # The visibility API server reads its cert from a fixed /visibility and binds every interface.
        "featureGates": {"VisibilityOnDemand": False},
    }


def _is_kueue_kind(webhook: dict) -> bool:
    return any("kueue.x-k8s.io" in rule.get("apiGroups", []) for rule in webhook.get("rules", []))


def _keeps(webhook: dict, frameworks: Sequence[str]) -> bool:
    wanted = {FRAMEWORK_RESOURCES[f] for f in frameworks if f in FRAMEWORK_RESOURCES}
    for rule in webhook.get("rules", []):
        for group in rule.get("apiGroups", []):
            if group == "kueue.x-k8s.io":
                return True
            if any((group, resource.split("/")[0]) in wanted for resource in rule.get("resources", [])):
                return True
    return False


def webhook_configurations(manifests: Iterable[dict], port: int, ca_pem: bytes, *,
                           frameworks: Sequence[str] = DEFAULT_FRAMEWORKS,
                           name_prefix: str = "kueue-", queued_only: bool = False) -> list[dict]:
    """Upstream's Mutating/ValidatingWebhookConfigurations with each service reference turned into
    `https://127.0.0.1:<port><path>`, only the webhooks of Kueue's own kinds and of `frameworks` kept.

    `queued_only`: the framework webhooks see only objects with the queue-name label. Upstream's match every
    Job, so while the manager is down no Job at all can be created, KubeRay's submitter Jobs included. Only
    right with manageJobsWithoutQueueName off and no LocalQueue named `default` (Kueue would give unlabelled
    jobs that one); an update that drops the label is still seen, the old object matching."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for manifest in manifests:
        if not manifest or manifest.get("kind") not in (
                "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        config = copy.deepcopy(manifest)
        # Upstream's names are generic (mutating-webhook-configuration); prefixed so they say whose they are.
        config["metadata"] = {"name": name_prefix + config["metadata"]["name"]}
        hooks = []
        for hook in config.get("webhooks", []):
            if not _keeps(hook, frameworks):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            if queued_only and not _is_kueue_kind(hook):
                hook["objectSelector"] = {"matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]}
            hooks.append(hook)
        config["webhooks"] = hooks
        out.append(config)
    return out


def crds(manifests: Iterable[dict], port: int, ca_pem: bytes) -> list[dict]:
    """Upstream's CRDs, with the conversion webhook its kustomization adds pointed at loopback."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for manifest in manifests:
        if not manifest:
            continue
        crd = copy.deepcopy(manifest)
        if crd["metadata"]["name"] in CONVERSION_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": bundle},
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def resource_flavor(name: str = "default-flavor") -> dict:
    """No node labels: every KWOK node is alike, so one flavor covers them all."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}


def cluster_queue(name: str, quota: Quota, *, flavor: str = "default-flavor") -> dict:
    resources = {"cpu": quota.cpu, "memory": quota.memory, GPU: str(quota.gpu), **quota.extra}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            # Every namespace may point a LocalQueue at it.
            "namespaceSelector": {},
            # StrictFIFO would let one too-big head block everything behind it; BestEffortFIFO lets smaller
            # workloads past it, which is what a shared GPU pool wants.
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{
                "coveredResources": list(resources),
                "flavors": [{"name": flavor, "resources": [
                    {"name": n, "nominalQuota": q} for n, q in resources.items()]}],
            }],
        },
    }


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def manager_launch(binary: Path, config_file: Path, kubeconfig: Path, *, etc_overlay: Path | None,
                   log_level: str = "info") -> Launch:
    """argv and extra env of the manager.

    `etc_overlay` is a directory holding `kueue/metrics/certs/{tls.crt,tls.key}`: the manager then runs in a
    user and mount namespace of its own in which that directory is laid over /etc, because main.go reads
    the metrics certificate from /etc/kueue/metrics/certs and nothing configures that path. The network
    stays the host's, so everything still meets on 127.0.0.1; the PID stays the manager's (unshare and sh
    exec). None: the caller has put the files at the real /etc/kueue/metrics/certs (needs root).
    """
    manager = [str(binary), f"--config={config_file}", f"--zap-log-level={log_level}"]
    if etc_overlay is None:
        argv = manager
    else:
        argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                'mount -t overlay kueue-etc -o "lowerdir=$1:/etc" /etc && shift && exec "$@"',
                "kueue-etc", str(etc_overlay), *manager]
    return Launch(argv=argv, env={"KUBECONFIG": str(kubeconfig)})
