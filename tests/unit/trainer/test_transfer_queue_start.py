"""TransferQueue started by an actor of the driver's (grpo_trainer.startup.transfer_queue_start), on a real local Ray
with the TransferQueue 0.1.11 verl 0.9.1 uses: the controller and storage units it starts are the ones verl's
own `transfer_queue.init` then joins, data goes through them, and nothing is left after the stop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from grpo_trainer.startup import transfer_queue_start
from grpo_trainer.startup.ray_names import name_held
from grpo_trainer.startup.transfer_queue_start import (
    CONTROLLER_NAME,
    CONTROLLER_NAMESPACE,
    STARTER_NAME,
    await_starter,
    merged_config,
    one_round_blockers,
    start_in_one_round,
    start_path,
    start_transfer_queue,
    stop_transfer_queue,
    storage_unit_names,
)
from omegaconf import DictConfig, OmegaConf

# Neither verl's default (8) nor TransferQueue's (2): the settings must reach the start. One: every storage unit
# is a Ray actor whose process imports transfer_queue (~7 s of CPU on a 2-core CI machine), and each start has them.
UNITS = 1
CAPACITY = 30_000


def _settings(verl_defaults: DictConfig, **simple_storage: Any) -> dict[str, Any]:
    """verl's transfer_queue section as the TaskRunner passes it (enable set), with UNITS storage units."""
    settings = OmegaConf.to_container(verl_defaults.transfer_queue, resolve=True)
    assert isinstance(settings, dict)
    settings["enable"] = True
    settings["backend"]["SimpleStorage"].update(
        num_data_storage_units=UNITS, total_storage_size=CAPACITY, **simple_storage
    )
    return settings


def _stored_config() -> dict[str, Any]:
    """The config the controller hands every joining process, its addresses left out (they differ per start)."""
    import ray

    controller = ray.get_actor(CONTROLLER_NAME, namespace=CONTROLLER_NAMESPACE)
    conf = ray.get(controller.get_config.remote())
    conf.controller.zmq_info = None
    conf.backend.SimpleStorage.zmq_info = None
    stored = OmegaConf.to_container(conf)
    assert isinstance(stored, dict)
    return stored


def _start_and_wait(settings: dict[str, Any], one_round: bool = True) -> str:
    import ray

    start_transfer_queue(settings, {"num_cpus": 0}, one_round=one_round)
    return ray.get(transfer_queue_start._starter["start"], timeout=120)


# ------------------------------------------------------------------- when one round stands in for init


def test_verls_transfer_queue_settings_start_in_one_round(verl_defaults: DictConfig) -> None:
    conf = OmegaConf.to_container(merged_config(_settings(verl_defaults)))
    assert one_round_blockers(conf, "0.1.11") == []
    assert start_path(True, []) == "one round"
    assert start_path(False, []) == ""  # GRPO_TQ_ONE_ROUND=0: transfer_queue.init, nothing blocked it
    assert start_path(True, ["metrics enabled"]) == "metrics enabled"


def test_the_storage_unit_names_follow_the_settings(verl_defaults: DictConfig) -> None:
    assert storage_unit_names(_settings(verl_defaults)) == [f"TransferQueueStorageUnit#{i}" for i in range(UNITS)]
    assert storage_unit_names({"enable": True}) == ["TransferQueueStorageUnit#0", "TransferQueueStorageUnit#1"]


@pytest.mark.parametrize(
    ("override", "version", "reason"),
    [
        ({}, "0.1.12", "transfer_queue 0.1.12"),
        ({"backend": {"storage_backend": "MooncakeStore"}}, "0.1.11", "storage backend MooncakeStore"),
        ({"metrics": {"enabled": True}}, "0.1.11", "metrics enabled"),
        ({"controller": {"sampler": None}}, "0.1.11", "a sampler given as a class or an object"),
    ],
)
def test_what_one_round_cannot_vouch_for_goes_to_transfer_queues_own_init(
    verl_defaults: DictConfig, override: dict[str, Any], version: str, reason: str
) -> None:
    conf = OmegaConf.to_container(OmegaConf.merge(merged_config(_settings(verl_defaults)), override))
    (blocker,) = one_round_blockers(conf, version)
    assert blocker.startswith(reason)


def test_a_starter_that_cannot_import_transfer_queue_answers_failed(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transfer_queue", None)  # the import fails, installed or not
    starter = transfer_queue_start.TransferQueueStarter()
    assert starter.start(_settings(verl_defaults), one_round=True) == "failed"
    assert starter.outcome() == "failed"  # what the TaskRunner's await_starter reads
    out = capsys.readouterr().out
    assert transfer_queue_start.FAILED_LINE in out and "transfer_queue" in out


# ------------------------------------------------------------------- on a real local Ray


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")  # never a cluster another test started with `ray start`
        # each unit and the controller hold a CPU; two TransferQueues at once in the "taken" test
        ray.init(num_cpus=2 * (UNITS + 1) + 1, include_dashboard=False)
    yield
    ray.shutdown()


def _gone(name: str, namespace: str | None = None, within_s: float = 30.0) -> bool:
    """Killed actors leave the name registry shortly after, not at once."""
    deadline = time.monotonic() + within_s
    while name_held(name, namespace):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _unit_names() -> list[str]:
    return [f"TransferQueueStorageUnit#{i}" for i in range(UNITS)]


def _nothing_left() -> bool:
    """No storage unit, controller or starter of a start remains (waiting for Ray to free each name)."""
    units_gone = all([_gone(name) for name in _unit_names()])
    return units_gone and _gone(CONTROLLER_NAME, CONTROLLER_NAMESPACE) and _gone(STARTER_NAME)


@pytest.mark.slow
def test_the_task_runner_joins_the_started_transfer_queue_and_data_goes_through_it(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    settings = _settings(verl_defaults)
    start_transfer_queue(settings, {"num_cpus": 0}, one_round=True)
    # what the TaskRunner's constructor does at once (join_transfer_queue): waits for the starter's answer...
    assert await_starter(settings) == "started"
    assert all(name_held(name) for name in _unit_names())
    stored = _stored_config()
    assert stored["backend"]["SimpleStorage"]["num_data_storage_units"] == UNITS
    assert stored["backend"]["SimpleStorage"]["total_storage_size"] == CAPACITY
    # ...then verl's TaskRunnerV1.run: finds the controller, reads the stored config, connects
    tq.init(OmegaConf.create(settings))
    try:
        assert tq.interface._TQ_STORAGE is None  # joined, not started: the starter owns the units
        tq.kv_put(key="p0", partition_id="train", fields=TensorDict({"ids": torch.tensor([[5, 6, 7]])}, batch_size=1))
        got = tq.kv_batch_get(keys=["p0"], partition_id="train")
        assert got["ids"][0].tolist() == [5, 6, 7]
    finally:
        tq.close()  # the TaskRunner's close at the end of run: its client and the controller
    assert all(name_held(name) for name in _unit_names())  # the units are the starter's to shut down
    stop_transfer_queue()
    assert _nothing_left()
    assert transfer_queue_start._starter == {}


@pytest.mark.slow
def test_one_round_stores_the_config_transfer_queues_own_init_stores(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    settings = _settings(verl_defaults)
    stored = {}
    for one_round in (True, False):
        assert _start_and_wait(settings, one_round) == "started"
        stored[one_round] = _stored_config()
        stop_transfer_queue()
        assert _nothing_left()
    assert stored[True] == stored[False]


@pytest.mark.slow
def test_the_storage_units_are_up_before_the_controller_is_waited_for(
    local_ray: None, verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transfer_queue.init waits for the controller's address before it creates a unit; one round creates the
    # units first and waits for the controller once theirs are known
    import transfer_queue as tq
    from transfer_queue.storage.bootstrap import simple_storage_bootstrap
    from transfer_queue.utils import zmq_utils

    waited_for: list[str] = []
    real = zmq_utils.process_zmq_server_info

    def recorded(handlers: Any) -> Any:
        waited_for.append("units" if isinstance(handlers, dict) else "controller")
        return real(handlers)

    monkeypatch.setattr(zmq_utils, "process_zmq_server_info", recorded)
    monkeypatch.setattr(simple_storage_bootstrap, "process_zmq_server_info", recorded)
    conf = merged_config(_settings(verl_defaults))
    try:
        assert start_in_one_round(conf) is True
        assert waited_for == ["units", "controller"]
        assert set(conf.backend.SimpleStorage.zmq_info) == set(_unit_names())
        assert conf.controller.zmq_info is not None
    finally:
        tq.close()  # this process created them: the units are shut down, the controller killed
    assert _nothing_left()


@pytest.mark.slow
def test_a_transfer_queue_the_task_runner_started_first_is_left_to_it(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    import transfer_queue as tq

    settings = _settings(verl_defaults)
    tq.init(OmegaConf.create(settings))  # a TaskRunner that found no starter started its own
    try:
        assert _start_and_wait(settings) == "taken"
        stop_transfer_queue()
        # the starter created nothing, so its stop shut nothing of the TaskRunner's down
        assert all(name_held(name) for name in _unit_names())
        assert name_held(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    finally:
        tq.close()
    assert all(_gone(name) for name in _unit_names())


@pytest.mark.slow
@pytest.mark.parametrize("one_round", [True, False])
def test_after_a_failed_start_the_task_runner_starts_transfer_queue_itself(
    local_ray: None, verl_defaults: DictConfig, one_round: bool
) -> None:
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    # the starter's units cannot start (SSD offload without a path is refused in a unit's constructor)
    start_transfer_queue(
        _settings(verl_defaults, ssd_offload={"enabled": True, "path": None}), {"num_cpus": 0}, one_round
    )
    settings = _settings(verl_defaults)
    # join_transfer_queue: the failure is seen, the starter removed with all it made, the names free again
    assert await_starter(settings) == "failed"
    assert _gone(STARTER_NAME)
    assert not name_held(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    assert not any(name_held(name) for name in _unit_names())
    tq.init(OmegaConf.create(settings))  # verl's own start, in the TaskRunner
    try:
        assert tq.interface._TQ_STORAGE is not None
        tq.kv_put(key="p1", partition_id="train", fields=TensorDict({"ids": torch.tensor([[1, 2]])}, batch_size=1))
        assert tq.kv_batch_get(keys=["p1"], partition_id="train")["ids"][0].tolist() == [1, 2]
    finally:
        tq.close()
        stop_transfer_queue()  # the starter is gone already: logged, nothing raised
    assert all(_gone(name) for name in _unit_names())


def test_without_a_starter_the_task_runner_starts_transfer_queue_itself(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    assert await_starter(_settings(verl_defaults)) == "none"  # GRPO_WARM_START=0, or its creation failed


@pytest.mark.slow
def test_a_stop_right_after_the_start_waits_for_it_then_removes_everything(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    # a run that ended before TransferQueue was up: the close is queued behind the start, not run before it
    import ray

    start_transfer_queue(_settings(verl_defaults), {"num_cpus": 0}, one_round=True)
    started = transfer_queue_start._starter["start"]
    stop_transfer_queue()
    assert ray.get(started, timeout=30) == "started"
    assert _nothing_left()


@pytest.mark.slow
def test_an_early_ray_given_up_removes_the_starter_without_waiting_for_its_start(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    import ray

    start_transfer_queue(_settings(verl_defaults), {"num_cpus": 0}, one_round=True)
    started = transfer_queue_start._starter["start"]
    stop_transfer_queue(graceful=False)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(started, timeout=60)  # killed before it answered
    assert _nothing_left()
