"""Operator settings, from the environment (the Helm chart sets them)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GRPO_OPERATOR_")

    default_trainer_image: str = Field(
        default="grpo-trainer:0.1.0", description="Trainer image for GRPOJobs that set no spec.image.")
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty means the whole cluster.")
    metrics_port: int = Field(default=8080, description="Port of /metrics.")
    metrics_host: str = Field(default="0.0.0.0", description="Address /metrics listens on.")
    invalid_retry_seconds: float = Field(
        default=30.0, description="How often a job waiting for a missing PVC or ConfigMap is checked again.")
