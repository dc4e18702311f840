"""The Pod Security settings of every pod a GRPOJob gets: the "restricted" Pod Security Standard.

Ray head and workers, KubeRay's submitter, the converter (and the preflight Job) all run the trainer
image, whose user is `ray` (uid 1000, gid 1000). One place decides what they run as, so a namespace
labelled ``pod-security.kubernetes.io/enforce=restricted`` admits every one of them:

- the pod runs as that uid, never as root, with the RuntimeDefault seccomp profile;
- ``fsGroup`` makes a volume's root, which a CSI driver typically creates root-owned, group-writable
  by the trainer, so checkpoints can be written without an init container running as root;
  ``OnRootMismatch`` changes ownership only when the root does not already match, instead of walking
  a volume of checkpoints (hundreds of GB) at every pod start;
- every container drops all capabilities and may not escalate privileges.
"""

from __future__ import annotations

from typing import Any

# The trainer image's `ray` user (images/trainer/Dockerfile: useradd --uid 1000).
TRAINER_UID = 1000
TRAINER_GID = 1000


def pod_security_context(uid: int = TRAINER_UID, gid: int = TRAINER_GID) -> dict[str, Any]:
    """``spec.securityContext`` of a pod running the image of user ``uid``."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """``securityContext`` of every container: the container-level half of "restricted"."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restrict(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """Apply both halves to a pod spec (every container and init container); returns it for chaining."""
    pod_spec["securityContext"] = pod_security_context()
    for container in [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]:
        container["securityContext"] = container_security_context()
    return pod_spec
