"""Role placement: make verl's placement-group bundles ask for the role's Ray custom resource.

verl 0.9.1 builds every bundle in `RayResourcePool.get_placement_groups` as {"CPU": n, "GPU": 1} and
nothing else, so Ray may put actor workers on the reward pods. Each worker group of our RayCluster
advertises {"grpo.dev/<role>": gpus}; here every bundle of a pool gets {<role resource>: 1} as well.

verl 0.9.1 names its pools (the `name_prefix` of RayResourcePool):
  global_pool                         actor, reference, critic (and colocated vLLM)   -> actor
  reward_pool                         standalone reward model                         -> reward
  rollout_pool_<rank><suffix>         standalone rollout (trainer_mode=separate_async) -> rollout
  rollout_pool_reward_<rank><suffix>  reward model's vLLM servers                      -> reward
Teacher (distillation) pools are not one of our roles and stay unpinned.

Where it runs: pools are created in the TaskRunner actor and in actors it starts, never in the driver
only. `grpo_trainer.worker_setup.setup_worker` is Ray's `worker_process_setup_hook` for the job, so it
runs in every worker process before any task or actor, and installs this patch there.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

_POOL_ROLE_PATTERNS: tuple[tuple[re.Pattern[str], str | None], ...] = (
    (re.compile(r"^rollout_pool_reward_"), "reward"),
    (re.compile(r"^rollout_pool_teacher_"), None),
    (re.compile(r"^rollout_pool_"), "rollout"),
    (re.compile(r"^global_pool"), "actor"),
    (re.compile(r"^reward_pool"), "reward"),
    (re.compile(r"^teacher_pool"), None),
)

_state = threading.local()  # the pool whose placement groups this thread is creating now
_installed: dict[str, Any] = {}


def role_for_pool(pool_name: str) -> str | None:
    """Pure: which of our roles a verl resource pool serves (None: not ours to pin)."""
    for pattern, role in _POOL_ROLE_PATTERNS:
        if pattern.match(pool_name):
            return role
    return None


def pinned_bundles(
    bundles: list[dict[str, float]], pool_name: str, role_resources: Mapping[str, str]
) -> list[dict[str, float]]:
    """Pure: the bundles with one unit of the pool's role resource added (unchanged if the role has none)."""
    role = role_for_pool(pool_name)
    resource = role_resources.get(role) if role else None
    if resource is None:
        return bundles
    return [{**b, resource: 1.0} for b in bundles]


def _wrap_placement_group(original: Callable[..., Any], role_resources: Mapping[str, str]) -> Callable[..., Any]:
    @functools.wraps(original)
    def placement_group(bundles: list[dict[str, float]], *args: Any, **kwargs: Any) -> Any:
        pool = getattr(_state, "pool", None)
        if pool is not None:
            new = pinned_bundles(bundles, pool, role_resources)
            if new is not bundles:
                log.info("pool %s: bundles pinned to %s", pool, sorted(set(new[0]) - set(bundles[0])))
            else:
                log.warning("pool %s: no role resource configured, its bundles are not pinned", pool)
            bundles = new
        return original(bundles, *args, **kwargs)

    placement_group.__grpo_original__ = original  # type: ignore[attr-defined]
    return placement_group


def _wrap_get_placement_groups(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_placement_groups(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous = getattr(_state, "pool", None)
        _state.pool = self.name_prefix
        try:
            return original(self, *args, **kwargs)
        finally:
            _state.pool = previous

    get_placement_groups.__grpo_original__ = original  # type: ignore[attr-defined]
    return get_placement_groups


def install(role_resources: Mapping[str, str]) -> None:
    """Patch verl's RayResourcePool in this process (idempotent; a second call replaces the mapping)."""
    from verl.single_controller.ray import base

    uninstall()
    resources = dict(role_resources)
    # verl's module imported `placement_group` by name: replacing that name affects verl only, not Ray.
    base.placement_group = _wrap_placement_group(base.placement_group, resources)
    base.RayResourcePool.get_placement_groups = _wrap_get_placement_groups(base.RayResourcePool.get_placement_groups)
    _installed["role_resources"] = resources
    log.info("role placement installed: %s", resources)


def uninstall() -> None:
    from verl.single_controller.ray import base

    for owner, attr in ((base, "placement_group"), (base.RayResourcePool, "get_placement_groups")):
        current = getattr(owner, attr)
        original = getattr(current, "__grpo_original__", None)
        if original is not None:
            setattr(owner, attr, original)
    _installed.clear()


def installed_role_resources() -> dict[str, str] | None:
    return dict(_installed["role_resources"]) if _installed else None
