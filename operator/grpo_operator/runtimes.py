"""A GRPOJob's effective spec: its own fields over its GRPORuntime's, by the rules of docs/runtimes.md. Pure.

Scalars: the job's value when it sets one, else the runtime's. Lists of named things merge by name and maps by
key, the job's entry winning (env, imagePullSecrets, volumes, resources, labels, annotations); lists of
conditions a pod must meet or may ignore are joined (tolerations, nodeAffinity, capabilities). The network
section is taken whole from the job when it has one: an RDMA runtime's HCA list means nothing to an EFA job.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grpo_operator.api import (
    MonitoringSpec,
    PodMetadata,
    PodOverride,
    PodOverrides,
)
from grpo_operator.api.job import GRPOJobSpec
from grpo_operator.api.runtime import GRPORuntimeSpec
from grpo_operator.checkpoint_claim import READ_WRITE_MANY, new_claim_access_modes

T = TypeVar("T")


class RuntimeProblem(ValueError):
    """The job's runtime cannot be chosen: named but absent, or two marked default. Said on the job; looked for
    again later (a runtime created or unmarked meanwhile)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Sources:
    """Which spec fields the runtime gave a value (from_runtime), shares with the job (merged), or set where the
    job's value replaced it (overridden). Paths are the GRPOJob's camelCase spec paths."""

    from_runtime: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)

    def scalar(self, path: str, job: T | None, runtime: T | None) -> T | None:
        if runtime is None:
            return job
        if job is None:
            self.from_runtime.append(path)
            return runtime
        if job != runtime:
            self.overridden.append(path)
        return job

    def combined(self, path: str, job: Sequence[Any] | Mapping[str, Any] | None,
                 runtime: Sequence[Any] | Mapping[str, Any] | None, result: T) -> T:
        if runtime:
            (self.merged if job else self.from_runtime).append(path)
        return result


def by_key(runtime: Sequence[T] | None, job: Sequence[T] | None, key: Callable[[T], Hashable]) -> list[T] | None:
    """Runtime's entries the job does not replace, then the job's (its entry wins a shared key)."""
    if not runtime and not job:
        return list(job) if job is not None else None
    mine = {key(item) for item in job or ()}
    return [item for item in runtime or () if key(item) not in mine] + list(job or ())


def joined(runtime: Sequence[T] | None, job: Sequence[T] | None) -> list[T] | None:
    """Every entry of both, once each, runtime's first."""
    if not runtime and not job:
        return list(job) if job is not None else None
    out: list[T] = []
    for item in [*(runtime or ()), *(job or ())]:
        if item not in out:
            out.append(item)
    return out


def keyed(runtime: Mapping[str, T] | None, job: Mapping[str, T] | None) -> dict[str, T] | None:
    if not runtime and not job:
        return dict(job) if job is not None else None
    return {**(runtime or {}), **(job or {})}


def merge_pod_override(base: PodOverride | None, top: PodOverride | None, sources: Sources | None = None,
                       path: str = "") -> PodOverride | None:
    """`top`'s override over `base`'s (the job's over its runtime's, a user's over what network renders)."""
    if base is None or top is None:
        if base is not None and sources is not None:
            sources.from_runtime.append(path)
        return top if base is None else base
    s = sources if sources is not None else Sources()

    def at(name: str) -> str:
        return f"{path}.{name}"

    return PodOverride(
        resources=s.combined(at("resources"), top.resources, base.resources, keyed(base.resources, top.resources)),
        env=s.combined(at("env"), top.env, base.env, by_key(base.env, top.env, lambda e: e.name)),
        volumes=s.combined(at("volumes"), top.volumes, base.volumes,
                           by_key(base.volumes, top.volumes, lambda v: v.name)),
        shm_size=s.scalar(at("shmSize"), top.shm_size, base.shm_size),
        labels=s.combined(at("labels"), top.labels, base.labels, keyed(base.labels, top.labels)),
        annotations=s.combined(at("annotations"), top.annotations, base.annotations,
                               keyed(base.annotations, top.annotations)),
        tolerations=s.combined(at("tolerations"), top.tolerations, base.tolerations,
                               joined(base.tolerations, top.tolerations)),
        node_affinity=s.combined(at("nodeAffinity"), top.node_affinity, base.node_affinity,
                                 joined(base.node_affinity, top.node_affinity)),
        host_network=s.scalar(at("hostNetwork"), top.host_network, base.host_network),
        capabilities=s.combined(at("capabilities"), top.capabilities, base.capabilities,
                                joined(base.capabilities, top.capabilities)),
    )


def pods_of(spec: GRPOJobSpec) -> frozenset[str]:
    """The spec.pods roles whose pods the job creates (the others' overrides are merged but never rendered)."""
    placed = spec.placement.roles
    roles = {"head", "actor"}
    roles |= {"rollout"} if spec.placement.mode == "disaggregated" and placed.rollout is not None else set()
    roles |= {"reward"} if placed.reward is not None else set()
    roles |= {"preflight"} if spec.preflight.enabled else set()
    roles |= {"converter"} if spec.export.enabled and not spec.rehearsal else set()
    return frozenset(roles)


def _merge_pods(runtime: PodOverrides | None, job: PodOverrides | None, sources: Sources,
                created: frozenset[str]) -> PodOverrides | None:
    if runtime is None:
        return job
    job = job or PodOverrides()
    # Where a value went is said only for pods the job creates: a runtime's rollout override means nothing to a
    # colocated job.
    roles = {role: merge_pod_override(getattr(runtime, role), getattr(job, role),
                                      sources if role in created else None, f"pods.{role}")
             for role in PodOverrides.model_fields}
    return PodOverrides(**roles)


def _merge_pod_metadata(runtime: PodMetadata | None, job: PodMetadata | None, sources: Sources) -> PodMetadata | None:
    if runtime is None:
        return job
    job = job or PodMetadata()
    return PodMetadata(
        labels=sources.combined("podMetadata.labels", job.labels, runtime.labels,
                                keyed(runtime.labels, job.labels) or {}),
        annotations=sources.combined("podMetadata.annotations", job.annotations, runtime.annotations,
                                     keyed(runtime.annotations, job.annotations) or {}),
    )


def _merge_monitoring(runtime: MonitoringSpec | None, job: MonitoringSpec, sources: Sources) -> MonitoringSpec:
    if runtime is None:
        return job
    values = {name: sources.scalar(f"monitoring.{info.alias}", getattr(job, name), getattr(runtime, name))
              for name, info in MonitoringSpec.model_fields.items()}
    return MonitoringSpec(**values)


def apply_runtime(job: GRPOJobSpec, runtime: GRPORuntimeSpec) -> tuple[GRPOJobSpec, Sources]:
    """The job's effective spec under `runtime`, and where each runtime-given value went."""
    s = Sources()
    scheduling = job.scheduling.model_copy(update={
        "priority_class_name": s.scalar("scheduling.priorityClassName", job.scheduling.priority_class_name,
                                        runtime.priority_class_name),
        "queue_name": s.scalar("scheduling.queueName", job.scheduling.queue_name, runtime.queue_name),
    })
    checkpoints = job.checkpoints
    volume = checkpoints.volume
    if volume.claim_name is None:  # a class means nothing to a claim that exists already
        runtime_class = runtime.checkpoint_storage_class_name
        if runtime.shared_checkpoint_storage_class_name is not None and \
                READ_WRITE_MANY in new_claim_access_modes(job):
            runtime_class = runtime.shared_checkpoint_storage_class_name
        storage_class = s.scalar("checkpoints.volume.storageClassName", volume.storage_class_name, runtime_class)
        checkpoints = checkpoints.model_copy(
            update={"volume": volume.model_copy(update={"storage_class_name": storage_class})})
    network = job.network
    if runtime.network is not None:
        network = s.scalar("network", job.network, runtime.network)
    update = {
        "image": s.scalar("image", job.image, runtime.image),
        "service_account_name": s.scalar("serviceAccountName", job.service_account_name,
                                         runtime.service_account_name),
        "image_pull_secrets": s.combined("imagePullSecrets", job.image_pull_secrets, runtime.image_pull_secrets,
                                         by_key(runtime.image_pull_secrets, job.image_pull_secrets, lambda r: r.name)),
        "env": s.combined("env", job.env, runtime.env, by_key(runtime.env, job.env, lambda e: e.name)),
        "pod_metadata": _merge_pod_metadata(runtime.pod_metadata, job.pod_metadata, s),
        "monitoring": _merge_monitoring(runtime.monitoring, job.monitoring, s),
        "pods": _merge_pods(runtime.pods, job.pods, s, pods_of(job)),
        "network": network,
        "scheduling": scheduling,
        "checkpoints": checkpoints,
    }
    return job.model_copy(update=update), s


# --------------------------------------------------------------------------- which runtime

DEFAULT_RUNTIME_REASON = "RuntimeDefaultAmbiguous"
MISSING_RUNTIME_REASON = "RuntimeNotFound"
INVALID_RUNTIME_REASON = "RuntimeInvalid"
UNLISTED_RUNTIME_REASON = "RuntimesNotListed"


def choose_runtime(named: str | None, runtimes: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The GRPORuntime object a job takes: the one it names, else the one marked default, else none.

    `runtimes`: every GRPORuntime by name, as the apiserver returns them."""
    if named is not None:
        runtime = runtimes.get(named)
        if runtime is None:
            raise RuntimeProblem(
                MISSING_RUNTIME_REASON,
                f"spec.runtime: no GRPORuntime named {named!r} exists; correct spec.runtime (the cluster's admins "
                "know the runtimes; kubectl get grporuntimes lists them where you may read them) or have it "
                "created. The job is looked at again until it exists.",
            )
        return runtime
    defaults = sorted(name for name, body in runtimes.items() if (body.get("spec") or {}).get("default"))
    if len(defaults) > 1:
        raise RuntimeProblem(
            DEFAULT_RUNTIME_REASON,
            f"GRPORuntimes {', '.join(defaults)} are all marked default (spec.default: true) and the job names "
            "none; unmark all but one, or set spec.runtime on the job.",
        )
    return runtimes[defaults[0]] if defaults else None


# --------------------------------------------------------------------------- what a job keeps of it

RUNTIME_STATUS = "runtime"


def runtime_status(runtime: Mapping[str, Any], sources: Sources) -> dict[str, Any]:
    """status.runtime: the runtime as the job took it (its children are rendered from this snapshot for the job's
    whole life, whatever happens to the runtime later) and where its values went."""
    meta = runtime.get("metadata") or {}
    return {
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "generation": meta.get("generation"),
        "spec": dict(runtime.get("spec") or {}),
        "fromRuntime": sorted(sources.from_runtime),
        "merged": sorted(sources.merged),
        "overridden": sorted(sources.overridden),
    }


def recorded_runtime(job: Mapping[str, Any]) -> GRPORuntimeSpec | None:
    """The runtime the job took at its creation (status.runtime), if it took one."""
    taken = (job.get("status") or {}).get(RUNTIME_STATUS)
    if not taken:
        return None
    return GRPORuntimeSpec.model_validate(taken.get("spec") or {})


def effective_spec(job: Mapping[str, Any]) -> GRPOJobSpec:
    """The job's spec under the runtime it took (raises pydantic's ValidationError for a spec that does not parse)."""
    spec = GRPOJobSpec.model_validate(job["spec"])
    runtime = recorded_runtime(job)
    return spec if runtime is None else apply_runtime(spec, runtime)[0]


def recorded_monitoring(job: Mapping[str, Any]) -> dict[str, Any]:
    """The monitoring section of the runtime the job took (raw), for the alert thresholds the job leaves unset."""
    taken = (job.get("status") or {}).get(RUNTIME_STATUS) or {}
    return dict((taken.get("spec") or {}).get("monitoring") or {})
