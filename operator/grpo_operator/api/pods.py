"""Settings of every pod of a job that are not about placement: pull secrets, labels and annotations,
environment variables."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from grpo_operator.api.base import ApiModel, LabelMap, Name, cel, validations


class LocalObjectReference(ApiModel):
    """A reference to an object in the job's namespace by name."""

    name: Name = Field(description="Name of the object.")


class PodMetadata(ApiModel):
    """Extra labels and annotations for every pod the job creates (Ray head, workers, converter)."""

    labels: LabelMap = Field(
        default_factory=dict,
        description="Labels added to every pod; the operator's own labels (grpo.dev/*, app.kubernetes.io/*) win.",
    )
    annotations: LabelMap = Field(
        default_factory=dict, description="Annotations added to every pod, e.g. for sidecar injection or cost tags."
    )


class EnvVar(ApiModel):
    """An environment variable for every trainer container."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.value) != has(self.valueFrom)",
                "env entries need exactly one of value or valueFrom",
            )
        )
    )

    name: str = Field(
        min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: Annotated[str, Field(max_length=32768)] | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef), "
        "passed through to the pods as written.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
