"""The `grpo:` mapping of verl.yaml: our own extension settings (see docs/config-contract.md).

verl never sees this mapping. It is validated here, at the edge, with pydantic so that a typo in a
setting fails at start-up with the field's name instead of being ignored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class JobRef(_Strict):
    namespace: str
    name: str


class RewardSettings(_Strict):
    type: Literal["length", "function", "model"] = "length"


class PlacementSettings(_Strict):
    mode: Literal["colocated", "disaggregated"] = "colocated"
    # role -> Ray custom resource its worker group advertises; a role absent here is not pinned.
    role_resources: dict[Literal["actor", "rollout", "reward"], str] = Field(
        default_factory=dict, alias="roleResources"
    )


class DataSettings(_Strict):
    train_files: list[str] = Field(default_factory=list, alias="trainFiles")
    val_files: list[str] = Field(default_factory=list, alias="valFiles")
    prepared_dir: str = Field(default="/checkpoints/data", alias="preparedDir")
    oversize: Literal["drop", "refuse"] = "drop"


class MetricsSettings(_Strict):
    enabled: bool = True
    port: int = Field(default=9400, ge=1, le=65535)
    # 0.0.0.0 in the pod so Prometheus can scrape the head; tests bind 127.0.0.1.
    address: str = "0.0.0.0"
    # every step's whole verl metrics dict, one JSON line per step (grpo_trainer.progress.step_file);
    # unset: not written. Written whether or not the Prometheus endpoint is enabled.
    steps_file: str | None = Field(default=None, alias="stepsFile")


class ResumeFromSettings(_Strict):
    """A warm start's checkpoint directory (mounted read-only) and step (its latest when None)."""

    dir: str
    step: int | None = Field(default=None, ge=1)


class CheckpointSettings(_Strict):
    resume_from: ResumeFromSettings | None = Field(default=None, alias="resumeFrom")


class GrpoSettings(_Strict):
    job: JobRef | None = None
    max_model_len_factor: float = Field(default=1.2, gt=0, alias="maxModelLenFactor")
    reward: RewardSettings = Field(default_factory=RewardSettings)
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    data: DataSettings = Field(default_factory=DataSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
    # The verl keys the user wrote in the GRPOJob's spec.verl: the preflight names them as such.
    spec_verl_keys: list[str] = Field(default_factory=list, alias="specVerlKeys")
    # The verl keys the preflight may size for the job's model and GPUs (preflight/sizing.py): those the user left
    # unset. The operator renders its fixed defaults for them and replaces them with the sized values afterwards.
    sized_keys: list[str] = Field(default_factory=list, alias="sizedKeys")
