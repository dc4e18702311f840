"""Which of a job's pod overrides a namespace's Pod Security level refuses: said on the job before anything is
created, instead of a RayJob whose pods the apiserver refuses one by one (KubeRay retries them forever). Pure.

Everything the operator renders itself passes "restricted" (render/security.py); only spec.pods and spec.network
can ask for more: hostNetwork and hostPath volumes (refused by baseline and restricted), and added capabilities
(which come with allowPrivilegeEscalation, so restricted refuses any; baseline admits the container runtime's
default set).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from grpo_operator.api import PodOverride

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
# The Pod Security Standards' capability allowances (kubernetes.io/docs/concepts/security/pod-security-standards).
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})


@dataclass(frozen=True)
class Refusal:
    field: str  # spec path of what asks, e.g. pods.actor.hostNetwork
    needs: str  # the least level that admits it


def asks(role: str, override: PodOverride | None) -> list[Refusal]:
    """What in one role's override needs more than restricted, and the level it needs."""
    if override is None:
        return []
    found = []
    if override.host_network:
        found.append(Refusal(f"pods.{role}.hostNetwork", "privileged"))
    for volume in override.volumes or ():
        if volume.host_path is not None:
            found.append(Refusal(f"pods.{role}.volumes[{volume.name}].hostPath", "privileged"))
    added = sorted(set(override.capabilities or ()))
    if added:
        # Any: an added capability comes with allowPrivilegeEscalation (render/pod_overrides.py), which restricted
        # refuses; beyond the runtime's default set, only privileged admits it.
        needs = "privileged" if set(added) - BASELINE_CAPABILITIES else "baseline"
        found.append(Refusal(f"pods.{role}.capabilities ({', '.join(added)})", needs))
    return found


def refused(level: str, wanted: Iterable[Refusal]) -> list[Refusal]:
    """The asks a namespace enforcing `level` refuses (an unknown level is read as restricted, as the apiserver
    does with a value it cannot parse)."""
    rank = LEVELS.index(level) if level in LEVELS else len(LEVELS) - 1
    return [r for r in wanted if LEVELS.index(r.needs) < rank]


def enforced_level(labels: Mapping[str, str]) -> str:
    """The namespace's enforced level; unlabelled namespaces get the cluster's default, privileged unless the
    apiserver's PodSecurity configuration says otherwise (which the operator cannot read)."""
    return labels.get(ENFORCE_LABEL, "privileged")


def refusal_message(namespace: str, level: str, refusals: list[Refusal]) -> str:
    fields = ", ".join(f"spec.{r.field}" for r in refusals)
    least = "privileged" if any(r.needs == "privileged" for r in refusals) else "baseline"
    return (f"{fields} cannot run in namespace {namespace}: it enforces the {level} Pod Security Standard "
            f"({ENFORCE_LABEL}={level}), which refuses them. Label the namespace {ENFORCE_LABEL}={least} "
            f"(kubectl label namespace {namespace} --overwrite {ENFORCE_LABEL}={least}), run the job in a namespace "
            "that allows it, or remove those settings from the job and its GRPORuntime.")
