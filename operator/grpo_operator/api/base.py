"""What every part of the GRPOJob API is built from: the base models, the bounded scalar types and
the helpers that attach CEL rules (``x-kubernetes-validations``) to a schema.

Every string, list and map in the spec is bounded (maxLength/maxItems/maxProperties): the
immutability rules compare whole subtrees with ``self == oldSelf`` and the apiserver rejects a
CRD whose CEL rules have an unbounded estimated cost.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Bounds shared by many fields. Chosen from the Kubernetes limits they mirror.
NAME_MAX = 253  # DNS-1123 subdomain: PVC, ConfigMap, Secret, ServiceAccount, PriorityClass names
LABEL_VALUE_MAX = 63
PATH_MAX = 1024
IMAGE_MAX = 512
QUANTITY_MAX = 32
# KubeRay refuses RayJob names above 47 characters (MaxRayJobNameLength); the RayJob takes the
# GRPOJob's name, so the GRPOJob inherits the limit.
JOB_NAME_MAX = 47

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
# Kubernetes resource.Quantity as the apiserver's OpenAPI spells it, minus the sign: a negative
# CPU or memory is never meant.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def cel(rule: str, message: str) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry. Messages name the field and the fix."""
    return {"rule": rule, "message": message}


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """``json_schema_extra`` carrying CEL rules; ``crd.py`` keeps them on the inlined schema."""
    return {"x-kubernetes-validations": list(rules)}


class ApiModel(BaseModel):
    """Base: camelCase JSON, snake_case Python, unknown fields refused, values immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=DNS1123_SUBDOMAIN)]
RelPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=PATH_MAX,
        json_schema_extra=validations(
            cel(
                "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",
                "must be a path relative to the volume's root: drop the leading '/' and any '..'",
            )
        ),
    ),
]
Quantity = int | Annotated[str, Field(max_length=QUANTITY_MAX, pattern=QUANTITY_PATTERN)]
LabelMap = Annotated[dict[str, Annotated[str, Field(max_length=LABEL_VALUE_MAX)]], Field(max_length=32)]


class StatusModel(BaseModel):
    """Status parts: camelCase JSON, mutable (handlers build them), unknown fields ignored so an
    older operator can read a status written by a newer one."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
