"""grpo-operator: a GRPOJob becomes a role-pinned KubeRay RayJob running verl GRPO training."""

GROUP = "grpo.dev"
VERSION = "v1alpha1"
KIND = "GRPOJob"
PLURAL = "grpojobs"

__version__ = "0.1.0"
