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
- verl's `transfer_queue.init` in the TaskRunner finds the controller and connects, waiting for the stored
  config if the starter is not done yet. Should the TaskRunner get there first, it starts TransferQueue
  itself and the starter, finding the controller's name taken, creates nothing.
- An actor's children die with it, so the starter owns the units for the whole run: `stop_transfer_queue`
  (after the run, or when the early Ray is given up) has it shut them down, then removes it.

GRPO_TQ_ONE_ROUND=0: the starter calls `transfer_queue.init` (two rounds); bench variant ours_tq_two_rounds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

ONE_ROUND_ENV = "GRPO_TQ_ONE_ROUND"
# the version whose init this reorders (transfer_queue/interface.py `init`); any other: its own init
ONE_ROUND_VERSION = "0.1.11"
CONTROLLER_NAME = "TransferQueueController"
CONTROLLER_NAMESPACE = "transfer_queue"
STARTED_LINE = "grpo-train: transfer queue started early in "
TAKEN_LINE = "grpo-train: transfer queue not started early: the task runner started it first"
FAILED_LINE = "grpo-train: transfer queue not started early; the task runner starts it: "

_started: dict[str, Any] = {}  # the driver's starter actor, while it exists


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


class TransferQueueStarter:
    """The actor that starts TransferQueue and owns its processes until the run ends."""

    def start(self, settings: dict[str, Any], one_round: bool) -> str:
        started = time.monotonic()
        try:
            import transfer_queue as tq
            from omegaconf import OmegaConf

            imported = time.monotonic() - started
            conf = merged_config(settings)
            blockers = one_round_blockers(OmegaConf.to_container(conf), tq.__version__) if one_round else []
            if one_round and not blockers:
                if not start_in_one_round(conf):
                    print(TAKEN_LINE, flush=True)
                    return "taken"
                how = "in one round"
            else:
                tq.init(OmegaConf.create(settings))
                how = "by transfer_queue.init" + (f" ({'; '.join(blockers)})" if blockers else "")
        except Exception as e:
            print(f"{FAILED_LINE}{e!r}", flush=True)
            with contextlib.suppress(Exception):
                tq.close()
            return "failed"
        print(f"{STARTED_LINE}{time.monotonic() - started:.1f} s, {how}; its import took {imported:.1f} s",
              flush=True)
        return "started"

    def close(self) -> None:
        import transfer_queue as tq

        tq.close()


def start_transfer_queue(settings: dict[str, Any], options: dict[str, Any], one_round: bool = True) -> None:
    """Creates the starter actor with `options` and asks it to start TransferQueue; does not wait."""
    import ray

    try:
        actor = ray.remote(TransferQueueStarter).options(**options).remote()
        _started["actor"] = actor
        _started["start"] = actor.start.remote(settings, one_round)
    except Exception as e:  # the TaskRunner starts it, as verl would
        log.warning("%s%r", FAILED_LINE, e)


def stop_transfer_queue(wait_s: float = 300.0) -> None:
    """After the run: the starter shuts down the storage units it created (the TaskRunner's own
    `transfer_queue.close` removes the controller and its client, not storage it did not start), then it is
    removed. A start still under way (a run that ended first, an early Ray given up) is waited for first:
    the actor runs its calls in order."""
    actor = _started.pop("actor", None)
    _started.pop("start", None)
    if actor is None:
        return
    import ray

    try:
        ray.get(actor.close.remote(), timeout=wait_s)
    except Exception as e:  # its processes go with Ray when the driver ends
        log.warning("grpo-train: transfer queue close in its starter: %r", e)
    with contextlib.suppress(Exception):
        ray.kill(actor)
