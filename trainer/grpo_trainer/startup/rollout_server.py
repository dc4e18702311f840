"""verl's vLLM rollout servers, started while the actor's model loads (grpo_trainer.startup.early_servers).

`prestart` (the TaskRunner's constructor) creates each planned server as an actor of `GrpoVLLMHttpServer`,
verl's vLLMHttpServer whose constructor does nothing: its process starts and imports vLLM at once, with
the name, node, environment and concurrency verl will give it. `install` wraps the `server_class` of
verl's vLLMReplica for the training rollout: when verl creates a server (launch_servers), the early one of
that name is taken if verl's options are the same, and verl's own constructor runs in it (`bind`) with
verl's arguments; verl then launches the engine in it as in its own. Anything else (no early server of
that name, other options, a failed bind) gets verl's own server, the early one removed first so that its
name is free. What the servers do is verl's, unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.plugin.platform import get_platform
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from grpo_trainer.startup.early_servers import EarlyServers, asked_options, early_options, options_mismatch
from grpo_trainer.startup.ray_names import wait_until_free

log = logging.getLogger(__name__)

BOUND_LINE = "grpo-train: rollout server bound in "
NAME_RELEASE_TIMEOUT_S = 30.0
# an early server that is not up by then (no CPU to schedule it on its node, a runtime env that hangs) is
# given up and verl starts its own; on the H200 machine it was up 25 s before verl asked
BIND_TIMEOUT_S = 300.0


class GrpoVLLMHttpServer(vLLMHttpServer):
    """vLLMHttpServer whose process starts before verl's constructor arguments exist."""

    def __init__(self) -> None:  # the process is up and vLLM imported: enough for now
        pass

    def bind(self, **kwargs: Any) -> None:
        """verl's constructor, with the arguments verl's launch_servers passes."""
        vLLMHttpServer.__init__(self, **kwargs)


_EarlyActor = ray.remote(GrpoVLLMHttpServer)
# name -> (options in early_options' form, actor handle): kept here so the actors live until taken
_early: dict[str, tuple[dict[str, Any], Any]] = {}


def server_env_vars() -> dict[str, str]:
    """The environment verl 0.9.1 gives each server actor (launch_servers), computed as verl computes it."""
    platform = get_platform()
    return {**{var: "1" for var in platform.ray_noset_envvars()}, **platform.rollout_env_vars()}


def ray_options(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": options["name"],
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=options["node_id"], soft=options["soft"]),
        "runtime_env": options["runtime_env"],
        "max_concurrency": options["max_concurrency"],
    }


def prestart(plan: EarlyServers, node_id: str) -> list[str]:
    """Create the planned servers on `node_id` (not awaited); returns their names. Should one fail to be
    created, the others are removed again: verl creates all its own, under the same names."""
    install()  # first: a named actor created before would block verl's own of that name if nothing took it
    env_vars = server_env_vars()
    try:
        for name in plan.names:
            options = early_options(name, node_id, env_vars, plan.max_concurrency)
            _early[name] = (options, _EarlyActor.options(**ray_options(options)).remote())
    except Exception:
        discard_unused(quiet=True)
        raise
    return list(plan.names)


def take(options: dict[str, Any], kwargs: dict[str, Any]) -> Any | None:
    """The early server verl asks for, bound with verl's arguments; None: verl creates its own."""
    name = options.get("name")
    early = _early.pop(name, None) if isinstance(name, str) else None
    if early is None:
        return None
    started_with, handle = early
    if (why := options_mismatch(started_with, asked_options(options))) is not None:
        log.warning("grpo-train: rollout server %s started early is not used (%s); verl starts its own", name, why)
        release(name, handle)
        return None
    started = time.monotonic()
    try:
        ray.get(handle.bind.remote(**kwargs), timeout=BIND_TIMEOUT_S)
    except Exception:
        log.exception("grpo-train: rollout server %s started early did not bind; verl starts its own", name)
        release(name, handle)
        return None
    # one line a user (and the GPU bench's start-up breakdown) can read; the time is mostly what the
    # server's process still needed to import vLLM when verl asked for it
    print(f"{BOUND_LINE}{time.monotonic() - started:.1f} s ({name}, started early)", flush=True)
    return handle


def release(name: str, handle: Any) -> None:
    """Remove an early server and wait until its name is free for verl's own; an error naming the cause if
    it is not (verl's own would fail with Ray's "name already taken")."""
    try:
        ray.kill(handle, no_restart=True)
    except Exception as e:  # already gone
        log.debug("rollout server %s: %s", name, e)
    if wait_until_free(name, time.monotonic() + NAME_RELEASE_TIMEOUT_S):
        return
    raise RuntimeError(
        f"grpo-train: the rollout server {name} started early was removed, but Ray still held its name after "
        f"{NAME_RELEASE_TIMEOUT_S:.0f} s, so verl cannot create its own; set GRPO_EARLY_ROLLOUT_SERVERS=0"
    )


def discard_unused(quiet: bool = False) -> None:
    """The early servers verl did not ask for (another trainer mode, say): removed, not left idle."""
    for name in list(_early):
        _options, handle = _early.pop(name)
        if not quiet:
            log.warning("grpo-train: rollout server %s started early was not asked for; removed", name)
        try:
            release(name, handle)
        except RuntimeError as e:  # nobody creates a server of that name after this point
            log.warning("%s", e)


class _EarlyServerClass:
    """Stands for verl's `ray.remote(vLLMHttpServer)` in a replica: `.options(**o).remote(**kwargs)`."""

    def __init__(self, verl_class: Any) -> None:
        self.verl_class = verl_class

    def options(self, **options: Any) -> _EarlyCall:
        return _EarlyCall(self.verl_class, options)


class _EarlyCall:
    def __init__(self, verl_class: Any, options: dict[str, Any]) -> None:
        self.verl_class, self.options = verl_class, options

    def remote(self, **kwargs: Any) -> Any:
        handle = take(self.options, kwargs)
        return handle if handle is not None else self.verl_class.options(**self.options).remote(**kwargs)


_verl_replica_init = vLLMReplica.__init__


def _replica_init(self: vLLMReplica, *args: Any, **kwargs: Any) -> None:
    _verl_replica_init(self, *args, **kwargs)
    # the training rollout's replicas only: the reward model's and a teacher's servers are named otherwise
    if type(self) is vLLMReplica and not (self.is_reward_model or self.is_teacher_model or self.name_suffix):
        self.server_class = _EarlyServerClass(self.server_class)


def install() -> None:
    vLLMReplica.__init__ = _replica_init  # type: ignore[method-assign]
