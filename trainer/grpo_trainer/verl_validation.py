"""verl's own checks of a built config, as its main_ppo runs them before Ray starts.

A module of its own, not part of the cli, because both the cli (before a run, and on --dry-run) and the
preflight (grpo_trainer.preflight.config_checks) run them, and the preflight must not import the cli.
verl is imported only when a config is validated: importing this module costs nothing.
"""

from __future__ import annotations

from typing import Any

from grpo_trainer.errors import GrpoConfigError


def validate_with_verl(config: Any) -> None:
    """What verl's main_ppo.main does before Ray: device selection and validate_config. Also done on
    --dry-run, so a rendered config that verl would reject fails there, not on the cluster."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    try:
        validate_config(
            config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
        )
    except Exception as e:  # verl raises AssertionError, ValueError or hydra's InstantiationException
        raise GrpoConfigError(f"verl 0.9.1 rejects the config: {e}") from e
