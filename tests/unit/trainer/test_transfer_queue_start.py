"""TransferQueue started by an actor of the driver's (grpo_trainer.transfer_queue_start), on a real local Ray
with the TransferQueue 0.1.11 verl 0.9.1 uses: the controller and storage units it starts are the ones verl's
own `transfer_queue.init` then joins, data goes through them, and nothing is left after the stop."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from grpo_trainer import transfer_queue_start
from grpo_trainer.transfer_queue_start import (
    CONTROLLER_NAME,
    CONTROLLER_NAMESPACE,
    merged_config,
    one_round_blockers,
    start_in_one_round,
    start_transfer_queue,
    stop_transfer_queue,
)
from omegaconf import DictConfig, OmegaConf

UNITS = 2


def _settings(verl_defaults: DictConfig, **simple_storage: Any) -> dict[str, Any]:
    """verl's transfer_queue section as the TaskRunner passes it (enable set), with 2 storage units."""
    settings = OmegaConf.to_container(verl_defaults.transfer_queue, resolve=True)
    assert isinstance(settings, dict)
    settings["enable"] = True
    settings["backend"]["SimpleStorage"].update(num_data_storage_units=UNITS, **simple_storage)
    return settings


# ------------------------------------------------------------------- when one round stands in for init


def test_verls_transfer_queue_settings_start_in_one_round(verl_defaults: DictConfig) -> None:
    conf = OmegaConf.to_container(merged_config(_settings(verl_defaults)))
    assert one_round_blockers(conf, "0.1.11") == []


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


# ------------------------------------------------------------------- on a real local Ray


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")  # never a cluster another test started with `ray start`
        ray.init(num_cpus=2 + UNITS, include_dashboard=False)
    yield
    ray.shutdown()


def _alive(name: str, namespace: str | None = None) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


def _gone(name: str, namespace: str | None = None, within_s: float = 30.0) -> bool:
    """Killed actors leave the name registry shortly after, not at once."""
    deadline = time.monotonic() + within_s
    while _alive(name, namespace):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _unit_names() -> list[str]:
    return [f"TransferQueueStorageUnit#{i}" for i in range(UNITS)]


@pytest.mark.slow
def test_verls_init_joins_the_started_transfer_queue_and_data_goes_through_it(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    import ray
    import torch
    import transfer_queue as tq
    from tensordict import TensorDict

    settings = _settings(verl_defaults)
    start_transfer_queue(settings, {"num_cpus": 0}, one_round=True)
    assert ray.get(transfer_queue_start._started["start"], timeout=120) == "started"
    assert all(_alive(name) for name in _unit_names())
    # what verl's TaskRunnerV1.run does: finds the controller, reads the stored config, connects
    tq.init(OmegaConf.create(settings))
    try:
        tq.kv_put(key="p0", partition_id="train", fields=TensorDict({"ids": torch.tensor([[5, 6, 7]])}, batch_size=1))
        got = tq.kv_batch_get(keys=["p0"], partition_id="train")
        assert got["ids"][0].tolist() == [5, 6, 7]
    finally:
        tq.close()  # the TaskRunner's close at the end of run: its client and the controller
    stop_transfer_queue()
    assert all(_gone(name) for name in _unit_names())
    assert _gone(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    assert transfer_queue_start._started == {}


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
    assert all(_gone(name) for name in _unit_names())
    assert _gone(CONTROLLER_NAME, CONTROLLER_NAMESPACE)


@pytest.mark.slow
def test_a_transfer_queue_the_task_runner_started_first_is_left_to_it(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    import ray
    import transfer_queue as tq

    settings = _settings(verl_defaults)
    tq.init(OmegaConf.create(settings))  # the TaskRunner's constructor got there first
    try:
        start_transfer_queue(settings, {"num_cpus": 0}, one_round=True)
        assert ray.get(transfer_queue_start._started["start"], timeout=120) == "taken"
        stop_transfer_queue()
        # the starter created nothing, so its stop shut nothing of the TaskRunner's down
        assert all(_alive(name) for name in _unit_names())
        assert _alive(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    finally:
        tq.close()
    assert all(_gone(name) for name in _unit_names())


@pytest.mark.slow
@pytest.mark.parametrize("one_round", [True, False])
def test_a_failed_start_leaves_no_controller_for_the_task_runner_to_wait_on(
    local_ray: None, verl_defaults: DictConfig, one_round: bool
) -> None:
    import ray

    # a storage unit that cannot start: SSD offload without a path is refused in its constructor
    settings = _settings(verl_defaults, ssd_offload={"enabled": True, "path": None})
    start_transfer_queue(settings, {"num_cpus": 0}, one_round=one_round)
    assert ray.get(transfer_queue_start._started["start"], timeout=120) == "failed"
    # the TaskRunner's transfer_queue.init would find no controller and start TransferQueue itself
    assert _gone(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    stop_transfer_queue()


@pytest.mark.slow
def test_a_stop_right_after_the_start_waits_for_it_then_removes_everything(
    local_ray: None, verl_defaults: DictConfig
) -> None:
    # an early Ray given up (grpo_trainer.ray_start) stops TransferQueue while it is still starting
    start_transfer_queue(_settings(verl_defaults), {"num_cpus": 0}, one_round=True)
    starter = transfer_queue_start._started["actor"]
    stop_transfer_queue()
    assert all(_gone(name) for name in _unit_names())
    assert _gone(CONTROLLER_NAME, CONTROLLER_NAMESPACE)
    import ray

    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(starter.close.remote(), timeout=30)
