"""verl's TaskRunner actor, started before grpo-train prepares the data.

verl 0.9.1's `run_ppo(config, task_runner_class)` starts Ray, creates the TaskRunner actor and calls
its `run(config)`. The actor's process first imports verl (torch, transformers), and `run` then
imports the trainer, starts TransferQueue (a controller and its storage units: processes that each
import torch) and, after the workers, imports the rollout engine (vLLM) before it can start the
rollout servers. On the H200 machine each of those imports takes seconds to tens of seconds
(bench/gpu/RESULTS.md), one after the other.

grpo-train used to convert the data before calling run_ppo. Now `run_ppo` gets an `EarlyTaskRunner`:
its `.remote()` creates the actor right after Ray starts and only then prepares the data in the
driver, while the actor's process starts; where it can, grpo_trainer.startup.ray_start starts Ray and creates the
actor before the driver even imports verl, and `.remote()` hands run_ppo that actor. The actor's constructor
(`GrpoTaskRunnerV1`, built in the actor by grpo_trainer.startup.task_runner_host) does the preparation verl's `run`
would do first, so the two overlap:

- imports the trainer class for `trainer.v1.trainer_mode`, its agent loop and TransferQueue;
- imports the rollout replica class of `actor_rollout_ref.rollout.name` (vLLM's server module);
- starts TransferQueue with the job's `transfer_queue` settings, exactly as `run` would, or joins the one
  started beside it; last, after the early starts below, which do not need it. `run` then calls
  `transfer_queue.init` again, which finds the controller and only connects to it.

`run` itself is verl's, unchanged. A failure in the constructor (a broken import, TransferQueue not
starting) is the error `run` would have raised, reported before the data is read a second time.

Two more start-up processes are started earlier than verl starts them (bench/gpu/RESULTS.md, issue 17.3):

- TransferQueue: an actor of the driver's starts its controller and storage units right after the TaskRunner
  actor is created, while the TaskRunner's own process starts (grpo_trainer.startup.transfer_queue_start). The
  constructor's `transfer_queue.init` then finds the controller and connects, as verl's `run` does; if
  it was not started early, the constructor starts it itself, as before.
- verl's agent-loop workers and their request load balancer (grpo_trainer.startup.agent_loop): their processes
  start at the end of the constructor and get verl's constructor arguments (the balancer: the rollout
  servers) once the rollout servers are up.
- the rollout server's module in the warm load balancer (`import_in_actor`): handing it the servers makes
  Ray deserialize their actor handles, and Ray's `load_actor_class` imports the server class's module
  (verl's vLLM server: vLLM itself) in the receiving process first. verl's own balancer pays that after
  "ready to fit", off the path to step 1; the warm one is handed its servers on that path (5-6 s on the
  H200 machine between "LLMServerManager" and "checkpoint engine manager initialized", issue 17.3), so it
  imports the module while it waits instead. GRPO_WARM_SERVER_IMPORT=0: not imported early.
- the training rollout's vLLM server actors (grpo_trainer.startup.early_servers and .rollout_server): verl
  creates them after the actor's model is loaded and each then imports vLLM (24-26 s on the H200 machine);
  they start in the constructor instead, right after its imports (vLLM's among them) and TransferQueue's
  connection, where their name and node are already known; any verl does not ask for are removed once its
  servers are up (`init_agent_loop_manager`).
  GRPO_EARLY_ROLLOUT_SERVERS=0: verl starts them.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpo_trainer.startup.early_servers import EarlyServers, plan_early_servers

log = logging.getLogger(__name__)

# "0": TransferQueue, the agent-loop workers, the rollout servers and Ray (grpo_trainer.startup.ray_start) start
# when verl starts them
WARM_START_ENV = "GRPO_WARM_START"
PREPARED_LINE = "grpo-train: task runner prepared: "


@dataclass(frozen=True)
class Preload:
    """What the TaskRunner prepares in its constructor (pure data: built from the config)."""

    modules: tuple[str, ...]
    trainer_mode: str | None  # verl.trainer.ppo.v1.get_trainer_cls(mode); None for the v0 trainer
    rollout_engine: str | None  # verl.workers.rollout.replica.get_rollout_replica_class(name)
    transfer_queue: dict[str, Any] | None  # transfer_queue.init(...) settings; None: not started early
    agent_loop_workers: int = 0  # verl's agent-loop workers to start early (grpo_trainer.startup.agent_loop); 0: none
    full_determinism: bool = False  # actor_rollout_ref.rollout.full_determinism, for the early load balancer
    transfer_queue_early: bool = True  # started beside the TaskRunner (grpo_trainer.startup.transfer_queue_start)
    warm_server_import: bool = True  # the warm load balancer imports the rollout server's module early
    early_servers: EarlyServers | None = None  # vLLM servers started early (grpo_trainer.startup.rollout_server)
    early_servers_skipped: str = ""  # why none are, when early_servers is None


def preload_plan(config: Any) -> Preload:
    """Pure: the constructor's work for this verl config (an OmegaConf DictConfig or a plain mapping)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(config) if not OmegaConf.is_config(config) else config
    engine = OmegaConf.select(cfg, "actor_rollout_ref.rollout.name")
    if not OmegaConf.select(cfg, "trainer.use_v1", default=True):
        # the legacy trainer starts no TransferQueue and has its own imports: nothing to prepare
        return Preload(modules=(), trainer_mode=None, rollout_engine=None, transfer_queue=None)
    tq = OmegaConf.select(cfg, "transfer_queue")
    tq_settings = OmegaConf.to_container(tq, resolve=True) if tq is not None else {}
    assert isinstance(tq_settings, dict)
    # verl's TaskRunnerV1.run sets enable before it starts TransferQueue; the same settings here
    tq_settings["enable"] = True
    # a manager class of the user's own creates its workers its own way: nothing started early then
    custom_manager = OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
    workers = int(OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.num_workers", default=0) or 0)
    early_servers, skipped = _plan_early_servers(cfg)
    return Preload(
        modules=("transfer_queue", "verl.trainer.ppo.v1"),
        trainer_mode=OmegaConf.select(cfg, "trainer.v1.trainer_mode"),
        rollout_engine=str(engine) if engine else None,
        transfer_queue=tq_settings,
        agent_loop_workers=0 if custom_manager else workers,
        full_determinism=bool(OmegaConf.select(cfg, "actor_rollout_ref.rollout.full_determinism", default=False)),
        early_servers=early_servers,
        early_servers_skipped=skipped,
    )


def _plan_early_servers(cfg: Any) -> tuple[EarlyServers | None, str]:
    """plan_early_servers on the keys it reads, resolved now (OmegaConf.select resolves what it returns)."""
    from omegaconf import OmegaConf

    try:
        rollout = OmegaConf.select(cfg, "actor_rollout_ref.rollout")
        plain = {
            "actor_rollout_ref": {
                "rollout": OmegaConf.to_container(rollout, resolve=True) if OmegaConf.is_config(rollout) else rollout,
                "hybrid_engine": OmegaConf.select(cfg, "actor_rollout_ref.hybrid_engine"),
            },
            "trainer": {
                "nnodes": OmegaConf.select(cfg, "trainer.nnodes"),
                "n_gpus_per_node": OmegaConf.select(cfg, "trainer.n_gpus_per_node"),
            },
        }
    except Exception as e:  # an interpolation verl resolves later: verl starts its servers itself
        return None, f"rollout config not resolvable before the run ({e})"
    return plan_early_servers(plain)


def run_preload(plan: Preload) -> dict[str, float]:
    """The plan's imports in this process; returns seconds per part (logged, and read by the GPU bench)."""
    took: dict[str, float] = {}
    start = time.monotonic()
    for name in plan.modules:
        importlib.import_module(name)
    if plan.trainer_mode is not None:
        from verl.trainer.ppo.v1 import get_trainer_cls

        get_trainer_cls(plan.trainer_mode)
    took["imports"] = time.monotonic() - start
    if plan.rollout_engine is not None:
        start = time.monotonic()
        from verl.workers.rollout.replica import get_rollout_replica_class

        get_rollout_replica_class(plan.rollout_engine)
        took["rollout engine import"] = time.monotonic() - start
    return took


def join_transfer_queue(plan: Preload) -> dict[str, float]:
    """`transfer_queue.init` with the plan's settings, as verl's `run` calls it: joins the TransferQueue started
    beside the TaskRunner once its starter has answered (grpo_trainer.startup.transfer_queue_start), or starts it if
    that start failed or never was; returns the seconds it took."""
    if plan.transfer_queue is None:
        return {}
    from omegaconf import OmegaConf

    start = time.monotonic()
    if plan.transfer_queue_early:
        from grpo_trainer.startup.transfer_queue_start import await_starter

        await_starter(plan.transfer_queue)
    import transfer_queue as tq

    tq.init(OmegaConf.create(plan.transfer_queue))
    return {"transfer queue": time.monotonic() - start}


def balancer_imports(plan: Preload, server_module: str | None) -> tuple[str, ...]:
    """Pure: the modules the warm load balancer imports before it is handed the rollout servers."""
    if not plan.warm_server_import or plan.agent_loop_workers <= 0 or not server_module:
        return ()
    return (server_module,)


def rollout_server_module(engine: str | None) -> str | None:
    """The module of verl's rollout replica class for `engine` (its server actor class is defined beside it);
    imported by run_preload already, so cheap here."""
    if engine is None:
        return None
    try:
        from verl.workers.rollout.replica import get_rollout_replica_class

        return get_rollout_replica_class(engine).__module__
    except Exception as e:  # a verl whose registry looks otherwise: nothing imported early, the rest unchanged
        log.warning("grpo-train: rollout server module of %r not found (%s); not imported early", engine, e)
        return None


def import_in_actor(_actor: Any, names: tuple[str, ...]) -> float:
    """The body of `actor.__ray_call__`: imports `names` in that actor's process; returns the seconds it took.
    Lives here, in a module of stdlib imports, because Ray imports the function's module in the actor."""
    started = time.monotonic()
    for name in names:
        importlib.import_module(name)
    return time.monotonic() - started


@dataclass
class EarlyTaskRunner:
    """verl's `task_runner_class` argument: run_ppo only calls `.remote()` or `.options(...).remote()`.

    The actor is created with `default_options` (and the options run_ppo adds), given `init_args`, and
    `on_created` runs (TransferQueue is started beside it); then `before_run` runs in the driver
    while the actor starts, and the handle goes back to run_ppo. `create` makes the actor before run_ppo
    asks for it, once Ray is up (grpo_trainer.startup.ray_start); run_ppo then gets that same actor.
    """

    actor_class: Any
    default_options: dict[str, Any]
    init_args: tuple[Any, ...] = ()
    before_run: Callable[[], None] = field(default=lambda: None)
    on_created: Callable[[], None] = field(default=lambda: None)
    handle: Any = field(default=None, compare=False)

    def create(self, options: dict[str, Any] | None = None) -> Any:
        """The actor: created on the first call, the same one after that."""
        if self.handle is None:
            self.handle = self.actor_class.options(**(options or self.default_options)).remote(*self.init_args)
            self.on_created()
        elif options is not None and options != self.default_options:
            # ray_start refuses configs for which run_ppo adds options (the nsys profiler): never reached
            raise RuntimeError(f"the TaskRunner was created before run_ppo asked for options {options}")
        return self.handle

    def discard(self) -> None:
        """Removes the actor created early, so run_ppo creates a new one (grpo_trainer.startup.ray_start)."""
        if self.handle is not None:
            import ray

            with contextlib.suppress(Exception):  # Ray is shut down next: the actor goes with it anyway
                ray.kill(self.handle)
            self.handle = None

    def options(self, **options: Any) -> _Bound:
        return _Bound(self, {**self.default_options, **options})

    def remote(self) -> Any:
        return _Bound(self, dict(self.default_options)).remote()


@dataclass(frozen=True)
class _Bound:
    runner: EarlyTaskRunner
    options: dict[str, Any]

    def remote(self) -> Any:
        handle = self.runner.create(self.options)
        self.runner.before_run()
        return handle
