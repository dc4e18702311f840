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
    # Files of an upstream module kept beside the binaries (CRDs, webhook manifests), read from Go's module cache:
    # (module path, patterns relative to its root). They land flat in <build>/manifests.
    manifests: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # A Go toolchain of its own (GOTOOLCHAIN) for a module that needs a newer Go than the machine's; the others keep
    # the machine's, so their cache keys (which include the Go version) do not change.
    toolchain: str | None = None

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
        digest.update((self.toolchain or go_version).encode())
        if self.manifests:  # absent from the keys of the components without any, so their builds stay cached
            digest.update(repr(self.manifests).encode())
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
KUBERAY = Component("kuberay", {"ray-operator": "github.com/ray-project/kuberay/ray-operator"},
                    manifests=(("github.com/ray-project/kuberay/ray-operator", ("config/crd/bases/ray.io_*.yaml",)),))
HELM = Component(
    "helm",
    {"helm": "helm.sh/helm/v3/cmd/helm"},
    # Without the stamp `helm version` says v3.19 with no patch level.
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v3.19.5",
)

# The real node's programs: each its own module, so adding them left the control plane's cache keys alone.
KUBELET = Component("kubelet", {"kubelet": "k8s.io/kubernetes/cmd/kubelet"}, ldflags=_VERSION_LDFLAGS)
COREDNS = Component("coredns", {"coredns": "github.com/coredns/coredns"})

# The cloud-like profile's autoscaler and queue (cloud_profile.py). Karpenter v1.15.0's go.mod asks for Go 1.26.9,
# newer than this machine's 1.26.8; go1.27.3 is the newer toolchain the module proxy serves here.
KARPENTER = Component(
    "karpenter", {"karpenter": "sigs.k8s.io/karpenter/kwok"}, toolchain="go1.27.3",
    manifests=(("sigs.k8s.io/karpenter", (
        "kwok/charts/crds/karpenter.sh_nodepools.yaml", "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
        "kwok/charts/crds/karpenter.sh_nodeoverlays.yaml", "kwok/charts/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
        "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml")),),
)
KUEUE = Component(
    "kueue", {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
    ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0",
    manifests=(("sigs.k8s.io/kueue", ("config/components/crd/bases/*.yaml",
                                      "config/components/webhook/manifests.yaml")),),
)

# A container registry on 127.0.0.1 for the test of `hack/images --push`.
REGISTRY = Component("registry", {"registry": "github.com/distribution/distribution/v3/cmd/registry"})

CONTROL_PLANE: tuple[Component, ...] = (ETCD, KUBERNETES, KWOK, KUBERAY, HELM)
NODE: tuple[Component, ...] = (KUBELET, COREDNS)
CLOUD: tuple[Component, ...] = (KARPENTER, KUEUE)
TOOLS: tuple[Component, ...] = (REGISTRY,)
ALL: tuple[Component, ...] = (*CONTROL_PLANE, *NODE, *CLOUD, *TOOLS)
