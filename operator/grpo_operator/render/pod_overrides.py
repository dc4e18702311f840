"""spec.pods.<role> (and what spec.network adds) merged into a pod template the operator rendered.

Applied last, after the security context (security.py), so an added capability joins the dropped ALL rather
than being overwritten. What the override may not touch (our command, our mounts, GPU counts, GRPO_*/RAY_* env)
the CRD refuses at admission; here our own labels still win, as with spec.podMetadata.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api import ExtraVolume, PodOverride

SHM_VOLUME = "dshm"
_SOURCES = ("empty_dir", "host_path", "persistent_volume_claim", "config_map", "secret")


def volume_body(volume: ExtraVolume) -> dict[str, Any]:
    """The pod's volume entry for an ExtraVolume (its one source, as core/v1 spells it)."""
    body: dict[str, Any] = {"name": volume.name}
    for source in _SOURCES:
        value = getattr(volume, source)
        if value is not None:
            body[ExtraVolume.model_fields[source].alias or source] = value.model_dump(by_alias=True, exclude_none=True)
    return body


def _mount(volume: ExtraVolume) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": volume.name, "mountPath": volume.mount_path}
    if volume.read_only is not None:
        mount["readOnly"] = volume.read_only
    return mount


def apply_override(template: dict[str, Any], override: PodOverride | None) -> dict[str, Any]:
    """Merge `override` into a pod template ({metadata, spec}) whose first container is the operator's."""
    if override is None:
        return template
    meta, pod = template.setdefault("metadata", {}), template["spec"]
    container = pod["containers"][0]
    if override.resources:
        resources = container.setdefault("resources", {})
        for side in ("requests", "limits"):  # extended resources: requests must equal limits
            amounts = resources.setdefault(side, {})
            # Never the amounts the operator set (CPU, memory, GPUs: the CRD refuses them in an override; this
            # holds for a spec written around it too).
            amounts.update({k: str(v) for k, v in override.resources.items() if k not in amounts})
    if override.env:
        names = {e.name for e in override.env}
        container["env"] = [e for e in container.get("env", []) if e.get("name") not in names]
        container["env"] += [e.model_dump(by_alias=True, exclude_none=True) for e in override.env]
    for volume in override.volumes or ():
        pod.setdefault("volumes", []).append(volume_body(volume))
        container.setdefault("volumeMounts", []).append(_mount(volume))
    if override.shm_size is not None:
        for volume in pod.get("volumes", []):
            if volume.get("name") == SHM_VOLUME:
                volume.setdefault("emptyDir", {})["sizeLimit"] = str(override.shm_size)
    if override.labels:
        meta["labels"] = {**override.labels, **meta.get("labels", {})}
    if override.annotations:
        meta["annotations"] = {**meta.get("annotations", {}), **override.annotations}
    if override.host_network:
        pod["hostNetwork"] = True
        # Without it a host-network pod resolves names with the node's resolver and cannot find cluster Services
        # (the Ray head's).
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    if override.capabilities:
        context = container.setdefault("securityContext", {})
        context.setdefault("capabilities", {})["add"] = list(override.capabilities)
        # The trainer runs as uid 1000, and a non-root process gets no ambient capabilities from the container
        # runtime: a capability reaches only a binary with file capabilities (setcap), which no_new_privs (what
        # allowPrivilegeEscalation: false sets) would void. So asking for one lifts that, and restricted no longer
        # admits the pod (pod_security.py).
        context["allowPrivilegeEscalation"] = True
    return template
