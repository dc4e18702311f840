"""Decide which children a GRPOJob gets, in which order, and who owns them."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_operator.api import ExtraVolume, GRPOJobSpec, PodOverride, PodOverrides
from grpo_operator.plan import Plan
from grpo_operator.render import NetworkPeers, render_children


@dataclass(frozen=True)
class Child:
    body: dict
    # False for what must outlive the GRPOJob: a Retain checkpoint PVC keeps trained weights.
    owned: bool = True

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]


def training_children(spec: GRPOJobSpec, plan: Plan, network_policy: NetworkPeers | None) -> list[Child]:
    """Everything training needs, in creation order, each marked owned or not; `network_policy`: the operator's
    setting (None: off)."""
    keep_pvc = spec.checkpoints.delete_policy != "Delete"
    return [Child(obj, owned=not (obj["kind"] == "PersistentVolumeClaim" and keep_pvc))
            for obj in render_children(spec, plan, network_policy=network_policy)]


# What training needs beyond the preflight's children (gate.preflight_children), created once the preflight
# passes. The NetworkPolicy comes with the RayJob, not with the preflight: the preflight pod listens on nothing.
# The checkpoint PVC the operator creates too: the preflight does not mount it (on zonal storage its first pod
# decides its zone, and that must be the actor), and may choose its size.
AFTER_PREFLIGHT = ("PersistentVolumeClaim", "NetworkPolicy", "RayJob")


# Created in the second round trip. The RayJob: its pods would be refused for a missing ServiceAccount (and
# KubeRay would retry them later). The RoleBinding: the operator's own account has no `bind` verb, so the
# apiserver checks the bound Role's rules against what the operator holds, and a Role created in the same
# round trip may not exist yet (404, seen only with the chart's RBAC, never with an admin kubeconfig).
SECOND_WAVE = ("RayJob", "RoleBinding")


def creation_waves(children: list[Child]) -> list[list[Child]]:
    """The children in the order they can be created: each wave at once, after the one before."""
    return [[c for c in children if c.kind not in SECOND_WAVE], [c for c in children if c.kind in SECOND_WAVE]]


def missing_dependencies(
    spec: GRPOJobSpec, plan: Plan, claims: set[str], configmaps: dict[str, set[str] | None]
) -> list[tuple[str, str, str]]:
    """(field, reason, message) for each object the job needs that does not exist.

    `claims` are the PVC names that exist in the namespace; `configmaps` maps a ConfigMap name to its
    keys (None when absent).
    """
    problems: list[tuple[str, str, str]] = []

    def need_claim(field: str, claim: str | None) -> None:
        if claim and claim not in claims:
            problems.append(
                (
                    field,
                    "MissingPersistentVolumeClaim",
                    f"spec.{field}: PersistentVolumeClaim {claim!r} does not exist in the namespace; "
                    "create it (or fix the name) and the job starts on its own",
                )
            )

    need_claim("model.claimName", spec.model.claim_name)
    need_claim("data.claimName", spec.data.claim_name)
    if spec.reward.model is not None:
        need_claim("reward.model.claimName", spec.reward.model.claim_name)
    if spec.checkpoints.volume.claim_name:
        need_claim("checkpoints.volume.claimName", spec.checkpoints.volume.claim_name)
    if spec.export.enabled and spec.export.target is not None:
        need_claim("export.target.claimName", spec.export.target.claim_name)
    if spec.checkpoints.resume_from is not None and plan.resume_from is not None:
        need_claim("checkpoints.resumeFrom.claimName", plan.resume_from.claim)
    function = spec.reward.function
    if spec.reward.type == "function" and function is not None:
        keys = configmaps.get(function.config_map_name)
        if keys is None:
            problems.append(
                (
                    "reward.function.configMapName",
                    "MissingConfigMap",
                    f"spec.reward.function.configMapName: ConfigMap {function.config_map_name!r} does "
                    "not exist in the namespace; create it with your reward file "
                    f"(kubectl create configmap {function.config_map_name} --from-file={function.key})",
                )
            )
        elif function.key not in keys:
            problems.append(
                (
                    "reward.function.key",
                    "MissingConfigMapKey",
                    f"spec.reward.function.key: ConfigMap {function.config_map_name!r} has no key "
                    f"{function.key!r} (it has {sorted(keys)}); fix the key or the ConfigMap",
                )
            )
    for field, volume in override_volumes(spec):
        if volume.persistent_volume_claim is not None:
            need_claim(f"{field}.persistentVolumeClaim.claimName", volume.persistent_volume_claim.claim_name)
        if volume.config_map is not None and configmaps.get(volume.config_map.name) is None:
            name = volume.config_map.name
            problems.append((f"{field}.configMap.name", "MissingConfigMap",
                             f"spec.{field}.configMap.name: ConfigMap {name!r} does not exist in the namespace "
                             "(a volume of the job's pod overrides, or of its GRPORuntime's); create it or fix the "
                             "name, and the job starts on its own"))
    return problems


def override_volumes(spec: GRPOJobSpec) -> list[tuple[str, ExtraVolume]]:
    """(spec path, volume) of every volume the effective spec's pod overrides mount."""
    if spec.pods is None:
        return []
    return [(f"pods.{role}.volumes[{volume.name}]", volume)
            for role in PodOverrides.model_fields
            for volume in (getattr(spec.pods, role) or PodOverride()).volumes or ()]
