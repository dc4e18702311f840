"""The programs the local control plane builds, and where each one's pins live."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

MODULES_DIR = Path(__file__).resolve().parents[1] / "cluster" / "modules"

KUBERNETES_VERSION = "v1.34.4"


@dataclass(frozen=True, eq=False)
class Component:
    """One Go module of ours that pins a set of upstream commands."""

    name: str
    # binary name -> Go package it is built from
    commands: dict[str, str]
    ldflags: str = "-s -w"
    modules_dir: Path = MODULES_DIR

    @property
    def module_dir(self) -> Path:
        return self.modules_dir / self.name


    def cache_key(self, go_version: str) -> str:
        """Changes whenever a pin, the flags or the toolchain change, so a stale build is never reused."""
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.module_dir / name).read_bytes())
        digest.update(repr(sorted(self.commands.items())).encode())
        digest.update(self.ldflags.encode())
        digest.update(go_version.encode())
        return f"{self.name}-{digest.hexdigest()[:12]}"


_VERSION_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=34",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}",
    ]
)

KUBERNETES = Component(
    "kubernetes",
    {name: f"k8s.io/kubernetes/cmd/{name}" for name in
     ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")},
    ldflags=_VERSION_LDFLAGS,
)
ETCD = Component("etcd", {"etcd": "go.etcd.io/etcd/server/v3"})
KWOK = Component("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"})
KUBERAY = Component("kuberay", {"ray-operator": "github.com/ray-project/kuberay/ray-operator"})
HELM = Component(
    "helm",
    {"helm": "helm.sh/helm/v3/cmd/helm"},
    # Without the stamp `helm version` says v3.19 with no patch level.
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v3.19.5",
)

# The real node's programs: each its own module, so adding them left the control plane's cache keys alone.
KUBELET = Component("kubelet", {"kubelet": "k8s.io/kubernetes/cmd/kubelet"}, ldflags=_VERSION_LDFLAGS)
COREDNS = Component("coredns", {"coredns": "github.com/coredns/coredns"})

CONTROL_PLANE: tuple[Component, ...] = (ETCD, KUBERNETES, KWOK, KUBERAY, HELM)
NODE: tuple[Component, ...] = (KUBELET, COREDNS)
ALL: tuple[Component, ...] = (*CONTROL_PLANE, *NODE)
