"""Ray `worker_process_setup_hook` for the training job: installs our verl extensions in each worker.

The driver sets `ray_kwargs.ray_init.runtime_env.worker_process_setup_hook` to this function's path;
verl 0.9.1's run_ppo passes that runtime_env to ray.init, so Ray runs this in every worker process of
the job (the TaskRunner actor, the worker groups, the rollout and reward servers) before any task or
actor code. Settings arrive as environment variables of the same runtime_env.

Nothing of verl is imported here: each patch waits for the verl module it patches, so a worker that
never loads verl's resource pools or its Tracking (most of them) pays nothing for it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from types import ModuleType

from grpo_trainer.import_hooks import when_imported

SETUP_HOOK = "grpo_trainer.worker_setup.setup_worker"
ROLE_RESOURCES_ENV = "GRPO_ROLE_RESOURCES"
POOLS_MODULE = "verl.single_controller.ray.base"
TRACKING_MODULE = "verl.utils.tracking"
# grpo_trainer.rollback's patches: the names are repeated here so that this module imports nothing of ours
# that a worker may never need (test_worker_setup checks they match)
CHECKPOINT_MODULE = "verl.utils.checkpoint.checkpoint_manager"
FSDP_CHECKPOINT_MODULE = "verl.utils.checkpoint.fsdp_checkpoint_manager"
GUARDRAILS_ENV = "GRPO_GUARDRAILS"
ROLLBACK_ENV = "GRPO_ROLLBACK"

log = logging.getLogger(__name__)


def setup_worker() -> None:
    from grpo_trainer import placement, token_logprobs
    from grpo_trainer.progress import tracking
    from grpo_trainer.reward import model as reward_model

    # our INFO lines ("pool global_pool: bundles pinned to ...") in the worker's log, whatever level
    # verl gives the root logger when the worker imports it
    logging.getLogger("grpo_trainer").setLevel(logging.INFO)
    role_resources = role_resources_from_env(os.environ)
    if role_resources:
        # Placement errors propagate (the import of verl's pools fails): a worker that cannot pin
        # its pools must not start unpinned.
        when_imported(POOLS_MODULE, lambda _: placement.install(role_resources))
    when_imported(TRACKING_MODULE, lambda _: tracking.install())
    # verl's log-probabilities without flash-attn: one Python iteration per token (token_logprobs' docstring)
    token_logprobs.setup_worker()
    # the reward-loop workers (and the task runner) load it: model scores must reach the agent loop whole
    when_imported(reward_model.REWARD_LOOP_MODULE, reward_model.install)
    install_rollback_patches(os.environ)


def role_resources_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Pure: role -> Ray custom resource, as the driver put it in every worker's environment ({}: unpinned)."""
    return json.loads(environ.get(ROLE_RESOURCES_ENV) or "{}")


def install_rollback_patches(environ: Mapping[str, str]) -> None:
    """In the actor workers, where verl saves and loads checkpoints: acting guardrails keep the checkpoints
    a rollback may need from pruning; a rolled-back attempt sets its learning rate after the load."""
    if environ.get(GUARDRAILS_ENV):
        def protect(module: ModuleType) -> None:
            from grpo_trainer.rollback import protect

            protect.install_from_env(module, environ)

        when_imported(CHECKPOINT_MODULE, protect)
    if environ.get(ROLLBACK_ENV):
        def learning_rate(module: ModuleType) -> None:
            from grpo_trainer.rollback import learning_rate

            learning_rate.install_from_env(module, environ)

        when_imported(FSDP_CHECKPOINT_MODULE, learning_rate)
