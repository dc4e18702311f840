"""The KubeRay the operator needs: the RayJob fields it renders and reads, and the release that has them.

An older RayJob CRD does not refuse a field it lacks: the apiserver prunes it silently. Without
``workerGroupSpecs[].resources`` (KubeRay v1.5.0) no worker group advertises its role's Ray resource,
so verl's placement bundles can never be placed and the job hangs in its first step. So the installed
CRD's schema is read (at the operator's start and in the chart's install check), every RayJob is
created with ``fieldValidation=Strict`` (an old CRD then refuses, naming the field), and either way
the job is refused with the KubeRay version it needs.

The "since" versions come from KubeRay's own CRD (ray-operator/config/crd/bases/ray.io_rayjobs.yaml)
at each release tag from v1.0.0 to v1.7.0. ``python -m grpo_operator.kuberay`` writes the chart's copy
(charts/grpo-operator/files/kuberay-required-fields.yaml); a unit test fails when it drifts.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

RAYJOB_CRD = "rayjobs.ray.io"
RAYJOB_VERSION = "v1"
ITEMS = "[]"  # a path step into a list's items


@dataclass(frozen=True)
class RequiredField:
    """A RayJob schema field the operator relies on, and the KubeRay release whose CRD first has it."""

    path: tuple[str, ...]
    since: str
    why: str

    @property
    def dotted(self) -> str:
        return ".".join(self.path).replace(f".{ITEMS}", ITEMS)


REQUIRED_FIELDS: tuple[RequiredField, ...] = (
    RequiredField(
        ("spec", "rayClusterSpec", "workerGroupSpecs", ITEMS, "resources"),
        "1.5.0",
        "each worker group advertises its role's Ray resource; without it verl's bundles are never placed",
    ),
    RequiredField(("spec", "backoffLimit"), "1.2.0", "spec.scheduling.retries: a failed run is retried"),
    RequiredField(("status", "failed"), "1.2.0", "the restart count in the GRPOJob's status"),
    RequiredField(("spec", "activeDeadlineSeconds"), "1.1.0", "spec.scheduling.activeDeadlineSeconds"),
    RequiredField(("spec", "submitterPodTemplate"), "1.0.0", "the submitter pod's image, account and security"),
    RequiredField(("spec", "ttlSecondsAfterFinished"), "1.0.0", "the Ray cluster kept after a failure"),
)


# Needed only by the jobs that use it (spec.security.rayAuth: token): a KubeRay without it still runs the
# others. An older KubeRay cannot run a token-protected RayJob even with the token set by hand on every
# container: its dashboard client (v1.5.0 dashboardclient) sends no token when it polls the job's status,
# Ray answers 401, and the RayJob never learns that its job ended.
AUTH_OPTIONS = RequiredField(
    ("spec", "rayClusterSpec", "authOptions"),
    "1.5.1",
    "spec.security.rayAuth: token; KubeRay then polls the Ray dashboard with the job's token",
)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


FLOOR = max((f.since for f in REQUIRED_FIELDS), key=_version_key)


def schema_of(crd: Mapping[str, Any], version: str = RAYJOB_VERSION) -> Mapping[str, Any] | None:
    for served in (crd.get("spec") or {}).get("versions") or []:
        if served.get("name") == version:
            return (served.get("schema") or {}).get("openAPIV3Schema") or {}
    return None


def _has(schema: Mapping[str, Any], path: Iterable[str]) -> bool:
    node: Any = schema
    for step in path:
        node = node.get("items") if step == ITEMS else (node.get("properties") or {}).get(step)
        if not isinstance(node, Mapping):
            return False
    return True


def missing_fields(crd: Mapping[str, Any]) -> list[RequiredField]:
    """The required fields the CRD's ray.io/v1 schema lacks (all of them when it serves no v1)."""
    schema = schema_of(crd)
    if schema is None:
        return list(REQUIRED_FIELDS)
    return [f for f in REQUIRED_FIELDS if not _has(schema, f.path)]


def serves_auth_options(crd: Mapping[str, Any]) -> bool:
    """Whether the installed KubeRay can protect a job's Ray cluster with a token (AUTH_OPTIONS)."""
    schema = schema_of(crd)
    return schema is not None and _has(schema, AUTH_OPTIONS.path)


TOKEN_AUTH_UNSUPPORTED = (
    f"spec.security.rayAuth is token (the default), which needs KubeRay v{AUTH_OPTIONS.since} or later: the "
    f"installed KubeRay's RayJob CRD ({RAYJOB_CRD}) lacks {AUTH_OPTIONS.dotted}, and an older KubeRay cannot "
    "send the token when it polls the Ray dashboard, so the job would never finish. Upgrade KubeRay, CRDs "
    "included (kubectl apply --server-side -k "
    f"'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v{AUTH_OPTIONS.since}'), or set "
    "spec.security.rayAuth: disabled (any pod that reaches the Ray pods can then run code in the job; "
    "docs/security.md)"
)


def unsupported(missing: Iterable[RequiredField]) -> str:
    """What the user reads: the fields missing, what each is for, and the release to install."""
    fields = sorted(missing, key=lambda f: _version_key(f.since), reverse=True)
    described = "; ".join(f"{f.dotted} (KubeRay >= {f.since}: {f.why})" for f in fields)
    return (
        f"the installed KubeRay's RayJob CRD ({RAYJOB_CRD}) lacks {described}. Install KubeRay v{FLOOR} or later, "
        "CRDs included (Helm does not upgrade CRDs: kubectl apply --server-side -k "
        f"'github.com/ray-project/kuberay/ray-operator/config/crd?ref=v{FLOOR}'); the job starts once it is"
    )


NOT_INSTALLED = (
    f"KubeRay is not installed: the cluster serves no {RAYJOB_CRD} CRD. Install the KubeRay operator v{FLOOR} "
    "or later; the job starts once it is"
)

_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


def unknown_fields(message: str) -> list[str]:
    """The fields a strict create was refused for, list indices as `[]`: spec.a.b[0].c -> spec.a.b[].c."""
    return [re.sub(r"\[\d+\]", ITEMS, found) for found in _UNKNOWN_FIELD.findall(message)]


def refusal_of(message: str) -> str | None:
    """The user's message for an apiserver refusal of our RayJob, when it is a KubeRay too old for it."""
    fields = unknown_fields(message)
    if not fields:
        return None
    if fields == [AUTH_OPTIONS.dotted]:
        return TOKEN_AUTH_UNSUPPORTED
    known = {f.dotted: f for f in REQUIRED_FIELDS}
    missing = [known[f] for f in fields if f in known]
    if missing:
        return unsupported(missing)
    return (
        f"the installed KubeRay's RayJob CRD ({RAYJOB_CRD}) does not know {', '.join(fields)}, which the operator "
        f"sets; install KubeRay v{FLOOR} or later, CRDs included; the job starts once it is"
    )


class KubeRayUnsupported(Exception):
    """The apiserver refused the RayJob for fields the installed KubeRay does not have."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def whole_cluster(self) -> bool:
        """False when only the jobs that ask for token authentication are refused: the rest still run."""
        return self.message != TOKEN_AUTH_UNSUPPORTED


def chart_file() -> str:
    """charts/grpo-operator/files/kuberay-required-fields.yaml, read by the chart's install check."""
    body = {
        "floor": FLOOR,
        "crd": RAYJOB_CRD,
        "version": RAYJOB_VERSION,
        "fields": [{"path": list(f.path), "since": f.since, "why": f.why} for f in REQUIRED_FIELDS],
    }
    header = "# Generated by `python -m grpo_operator.kuberay`; do not edit (a unit test checks it).\n"
    return header + yaml.safe_dump(body, sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(chart_file())
