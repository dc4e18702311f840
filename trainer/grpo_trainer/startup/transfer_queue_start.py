"""TransferQueue's controller and storage units, started by an actor of the driver's as soon as Ray is up.

verl 0.9.1's TaskRunnerV1.run calls `transfer_queue.init`, which creates TransferQueue's controller, waits
for its address, then creates the storage units (verl's default: 8) and waits for theirs: two rounds of
processes, each importing torch. grpo-train started it earlier, from a thread of the driver, but the driver
first had to import `transfer_queue` (torch) itself, and the two rounds still took 20-26 s on the H200 machine:
the TaskRunner's constructor waited 7-10 s for them (bench/gpu/RESULTS.md, session 2026-12-04 e). Now:

- `TransferQueueStarter`, an actor whose module imports nothing heavy, is created right after the TaskRunner.
  Its process imports `transfer_queue` while the TaskRunner's imports verl; the driver imports neither for it.
- It starts the controller and the storage units in one round (`start_in_one_round`). A storage unit needs
  only its own settings, not the controller's address, so nothing has to wait for the controller before the
  units are created. The config stored in the controller, the actors' names and the handles `close` uses are
  the ones `transfer_queue.init` gives. Where that cannot be vouched for (another TransferQueue version,
  another storage backend, metrics on, a sampler object: `one_round_blockers`) it calls `transfer_queue.init`.
- The TaskRunner's constructor waits for the starter's answer (`await_starter`), then calls verl's
  `transfer_queue.init`, which finds the controller and connects. After a failed start the TaskRunner removes
  the starter, and with it whatever it had created, waits for their names to be free, and starts TransferQueue
  itself, as verl would. A starter that finds a controller already there creates nothing ("taken").
- An actor's children die with it, so the starter owns the units for the whole run: `stop_transfer_queue`
  after the run has it shut them down, then removes it; an early Ray given up removes it at once.

GRPO_TQ_ONE_ROUND=0: the starter calls `transfer_queue.init` (two rounds); bench variant ours_tq_two_rounds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal

from grpo_trainer.startup.ray_names import name_held, wait_until_free

log = logging.getLogger(__name__)

ONE_ROUND_ENV = "GRPO_TQ_ONE_ROUND"
# the version whose init this reorders (transfer_queue/interface.py `init`); any other: its own init
ONE_ROUND_VERSION = "0.1.11"
CONTROLLER_NAME = "TransferQueueController"
CONTROLLER_NAMESPACE = "transfer_queue"
STARTED_LINE = "grpo-train: transfer queue started early in "
TAKEN_LINE = "grpo-train: transfer queue not started early: the task runner started it first"
FAILED_LINE = "grpo-train: transfer queue not started early; the task runner starts it: "

STARTER_NAME = "grpo-transfer-queue-starter"
DEFAULT_STORAGE_UNITS = 2  # TransferQueue 0.1.11's config.yaml, when the settings name none
# "taken": a controller existed already (the TaskRunner's own start); "failed": nothing of it is left to join
Outcome = Literal["started", "taken", "failed"]

_starter: dict[str, Any] = {}  # the driver's starter actor and its start's reference, while it exists


def one_round_blockers(conf: Mapping[str, Any], version: str) -> list[str]:
    """Pure: why `start_in_one_round` cannot stand in for `transfer_queue.init` with this merged config."""
    blockers = []
    if version != ONE_ROUND_VERSION:
        blockers.append(f"transfer_queue {version} (one round is written for {ONE_ROUND_VERSION})")
    backend = conf.get("backend", {}).get("storage_backend")
    if backend != "SimpleStorage":
        blockers.append(f"storage backend {backend} (its bootstrap may start servers of its own)")
    if conf.get("metrics", {}).get("enabled"):
        blockers.append("metrics enabled (their exporters start after the config is stored)")
    if not isinstance(conf.get("controller", {}).get("sampler"), str):
        blockers.append("a sampler given as a class or an object")
    return blockers


def merged_config(settings: Mapping[str, Any]) -> Any:
    """TransferQueue's default config.yaml with `settings` over it, as `transfer_queue.init` merges them."""
    from importlib import resources

    from omegaconf import OmegaConf

    conf = OmegaConf.create({}, flags={"allow_objects": True})  # the addresses stored in it are objects
    return OmegaConf.merge(conf, OmegaConf.load(resources.files("transfer_queue") / "config.yaml"), settings)


def start_in_one_round(conf: Any) -> bool:
    """Creates the controller and the storage units, then waits for both; stores the config in the controller.

    Returns False, creating nothing, when a controller of that name exists already. The handles go where
    `transfer_queue.close` finds them, in this process; on any failure they are removed again, so a
    TaskRunner that found the controller does not wait on a config that never comes."""
    import ray
    from transfer_queue import interface
    from transfer_queue.storage.bootstrap import StorageBootstrapProvider
    from transfer_queue.utils.zmq_utils import process_zmq_server_info

    sampler = getattr(interface, conf.controller.sampler, None)
    if sampler is None:
        raise ValueError(f"transfer_queue.controller.sampler {conf.controller.sampler!r} is no TransferQueue sampler")
    try:
        controller = interface.TransferQueueController.options(
            name=CONTROLLER_NAME, namespace=CONTROLLER_NAMESPACE
        ).remote(sampler=sampler, polling_mode=conf.controller.polling_mode)
    except ValueError:  # the name is taken: someone else's init is under way
        return False
    interface._TQ_CONTROLLER = controller
    try:
        backend = conf.backend.storage_backend
        # creates the units and waits for their addresses while the controller's process starts
        interface._TQ_STORAGE = {backend: StorageBootstrapProvider.get_provider(backend)(conf)}
        conf.controller.zmq_info = process_zmq_server_info(controller)
        ray.get(controller.store_config.remote(conf))
    except BaseException:
        with contextlib.suppress(Exception):
            interface.close()
        raise
    return True


def start_path(one_round: bool, blockers: list[str]) -> str:
    """Pure: "one round", or why `transfer_queue.init` starts it ("" when one round was turned off)."""
    if one_round and not blockers:
        return "one round"
    return "; ".join(blockers)


def storage_unit_names(settings: Mapping[str, Any]) -> list[str]:
    """Pure: the storage units' actor names TransferQueue's SimpleStorage bootstrap gives for these settings."""
    simple = settings.get("backend", {}).get("SimpleStorage", {})
    units = int(simple.get("num_data_storage_units") or DEFAULT_STORAGE_UNITS)
    return [f"TransferQueueStorageUnit#{rank}" for rank in range(units)]


class TransferQueueStarter:
    """The actor that starts TransferQueue and owns its processes until the run ends."""

    def __init__(self) -> None:
        self._outcome: Outcome | None = None

    def start(self, settings: dict[str, Any], one_round: bool) -> Outcome:
        self._outcome = self._start(settings, one_round)
        return self._outcome

    def _start(self, settings: dict[str, Any], one_round: bool) -> Outcome:
        started = time.monotonic()
        try:
            import transfer_queue as tq
            from omegaconf import OmegaConf
        except Exception as e:  # nothing created yet: the TaskRunner's own start reports the same import
            print(f"{FAILED_LINE}{e!r}", flush=True)
            return "failed"
        imported = time.monotonic() - started
        try:
            # a controller there already is the TaskRunner's own start (it found no starter): left to it
            if name_held(CONTROLLER_NAME, CONTROLLER_NAMESPACE):
                print(TAKEN_LINE, flush=True)
                return "taken"
            conf = merged_config(settings)
            path = start_path(one_round, one_round_blockers(OmegaConf.to_container(conf), tq.__version__))
            if path == "one round":
                if not start_in_one_round(conf):
                    print(TAKEN_LINE, flush=True)
                    return "taken"
                how = "in one round"
            else:
                tq.init(OmegaConf.create(settings))
                how = "by transfer_queue.init" + (f" ({path})" if path else "")
        except Exception as e:
            print(f"{FAILED_LINE}{e!r}", flush=True)
            with contextlib.suppress(Exception):
                tq.close()
            return "failed"
        print(f"{STARTED_LINE}{time.monotonic() - started:.1f} s, {how}; its import took {imported:.1f} s",
              flush=True)
        return "started"

    def outcome(self) -> Outcome | None:
        """What `start` answered; a call queued behind `start` (one call at a time), so it waits for it."""
        return self._outcome

    def close(self) -> None:
        import transfer_queue as tq

        tq.close()


def start_transfer_queue(settings: dict[str, Any], options: dict[str, Any], one_round: bool = True) -> None:
    """Creates the starter actor (named, so the TaskRunner finds it) with `options` and asks it to start
    TransferQueue; does not wait."""
    import ray

    try:
        actor = ray.remote(TransferQueueStarter).options(name=STARTER_NAME, **options).remote()
        _starter["actor"] = actor
        _starter["start"] = actor.start.remote(settings, one_round)
    except Exception as e:  # the TaskRunner starts it, as verl would
        log.warning("%s%r", FAILED_LINE, e)


def await_starter(settings: Mapping[str, Any], timeout_s: float = 900.0, names_free_s: float = 120.0) -> str:
    """In the TaskRunner, before its `transfer_queue.init`: waits for the starter's answer. After a failed
    start the starter is removed, and with it whatever it created (an actor's children die with it), and the
    names its actors held are waited for, so the TaskRunner's own start finds them free. Returns the
    outcome, or "none" when no starter exists (not started early)."""
    import ray

    try:
        starter = ray.get_actor(STARTER_NAME)
    except ValueError:
        return "none"
    try:
        outcome = ray.get(starter.outcome.remote(), timeout=timeout_s) or "failed"
    except Exception as e:  # the starter died, or never answered: its start counts as failed
        print(f"{FAILED_LINE}{e!r}", flush=True)
        outcome = "failed"
    if outcome == "failed":
        with contextlib.suppress(Exception):
            ray.kill(starter)
        deadline = time.monotonic() + names_free_s
        for name in storage_unit_names(settings):
            wait_until_free(name, deadline)
        wait_until_free(CONTROLLER_NAME, deadline, CONTROLLER_NAMESPACE)
    return outcome


def stop_transfer_queue(graceful: bool = True, wait_s: float = 300.0) -> None:
    """After the run: the starter shuts down the storage units it created (the TaskRunner's own
    `transfer_queue.close` removes the controller and its client, not storage it did not start), then it is
    removed. A start still under way (a run that ended first) is waited for first: the actor runs its calls
    in order. graceful=False (an early Ray given up, grpo_trainer.startup.ray_start): the starter is removed at once,
    and what it created with it."""
    actor = _starter.pop("actor", None)
    _starter.pop("start", None)
    if actor is None:
        return
    import ray

    if graceful:
        try:
            ray.get(actor.close.remote(), timeout=wait_s)
        except Exception as e:  # its processes go with Ray when the driver ends
            log.warning("grpo-train: transfer queue close in its starter: %r", e)
    with contextlib.suppress(Exception):
        ray.kill(actor)
