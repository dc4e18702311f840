"""Every path that reads a GRPOJob's status and writes it back waits for the job's lock (retries.JOB_LOCKS):
status mirroring from child events and the claims' timer, beside the GRPOJob handlers that held it already.
Without it, a mirror working from a status read before the guardrails suspended the job would write the old
conditions back over theirs."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref
from collections.abc import Awaitable, Callable

import pytest
from grpo_operator.reconcile import binding, handlers, mirror
from grpo_operator.reconcile.lifecycle import Action
from grpo_operator.reconcile.retries import JOB_LOCKS
from grpo_operator.render.common import JOB_LABEL

KEY = ("team-a", "tiny")


def _runs_only_after_the_lock(start: Callable[[], Awaitable[None]], calls: list[tuple]) -> list[str]:
    """Hold the job's lock, start the path, and say what it did while held and after release."""

    async def scenario() -> list[str]:
        seen = []
        async with JOB_LOCKS.hold(KEY):
            task = asyncio.create_task(start())
            for _ in range(20):
                await asyncio.sleep(0)
            seen.append(f"while held: {len(calls)} call(s), done={task.done()}")
        await asyncio.wait_for(task, 30)
        seen.append(f"after release: {len(calls)} call(s)")
        return seen

    return asyncio.run(scenario())


@pytest.fixture
def mirrored(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []

    async def record(namespace: str, name: str, **kwargs: object) -> None:
        calls.append((namespace, name, kwargs))

    monkeypatch.setattr(mirror, "sync_status", record)
    return calls


def _rayjob(state: str, **status: object) -> dict:
    return {"metadata": {"namespace": KEY[0], "name": "tiny-train", "uid": "u1", "labels": {JOB_LABEL: KEY[1]}},
            "status": {"jobDeploymentStatus": state, "rayClusterStatus": {"state": "ready"}, **status}}


def test_rayjob_events_are_mirrored_only_under_the_jobs_lock_and_the_newest_wins(mirrored: list[tuple]) -> None:
    """The handler returns at once (the watch goes on to the next event, the RayJob's body goes); the mirroring
    waits for the job's lock, and of the events that came meanwhile mirrors the newest, slimmed to what the
    observation reads."""

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        async with JOB_LOCKS.hold(KEY):
            for state in ("Initializing", "Running"):
                mirror.rayjob_event("MODIFIED", _rayjob(state))
            for _ in range(20):
                await asyncio.sleep(0)
            held = len(mirrored)
        deadline = loop.time() + 30
        while not mirrored and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for _ in range(20):
            await asyncio.sleep(0)
        return held

    assert asyncio.run(scenario()) == 0
    assert len(mirrored) == 1 and mirrored[0][:2] == KEY
    assert mirrored[0][2]["rayjob"] == {"metadata": {"namespace": KEY[0], "name": "tiny-train", "uid": "u1"},
                                        "spec": {}, "status": {"jobDeploymentStatus": "Running"}}


def test_a_failed_mirror_is_logged_and_the_next_event_mirrors_again(monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    async def flaky(namespace: str, name: str, rayjob: dict) -> None:
        calls.append(rayjob["status"]["jobDeploymentStatus"])
        if len(calls) == 1:
            raise RuntimeError("apiserver went away")

    monkeypatch.setattr(mirror, "sync_status", flaky)

    async def scenario() -> None:
        for state in ("Running", "Complete"):
            mirror.rayjob_event("MODIFIED", _rayjob(state))
            for _ in range(50):
                await asyncio.sleep(0)

    asyncio.run(scenario())
    assert calls == ["Running", "Complete"]
    assert "mirroring the RayJob of team-a/tiny failed" in caplog.text


def test_export_job_event_mirrors_only_under_the_jobs_lock(mirrored: list[tuple]) -> None:
    seen = _runs_only_after_the_lock(
        lambda: mirror.export_job_event(namespace=KEY[0], labels={JOB_LABEL: KEY[1]}),
        mirrored,
    )
    assert seen == ["while held: 0 call(s), done=False", "after release: 1 call(s)"]


def test_another_jobs_lock_does_not_hold_up_the_mirror(mirrored: list[tuple]) -> None:
    async def scenario() -> int:
        async with JOB_LOCKS.hold((KEY[0], "other")):
            await asyncio.wait_for(mirror.export_job_event(namespace=KEY[0], labels={JOB_LABEL: KEY[1]}), 5)
            return len(mirrored)

    assert asyncio.run(scenario()) == 1


def test_claims_timer_schedules_its_check_under_the_jobs_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []

    async def record(namespace: str, name: str) -> None:
        calls.append((namespace, name))

    monkeypatch.setattr(binding, "check_waiting", record)
    monkeypatch.setattr(binding, "SETTINGS", dataclasses.replace(binding.SETTINGS, storage_check_seconds=0.0))

    async def scenario() -> list[str]:
        seen = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30  # generous: the timer's task only has to reach the lock
        async with JOB_LOCKS.hold(KEY):
            binding.check_waiting_later(*KEY)
            # The timer fired (delay 0) and its check queued behind us for the job's lock: two users of it.
            while JOB_LOCKS._locks[KEY][1] < 2 and loop.time() < deadline:
                await asyncio.sleep(0.01)
            seen.append(f"while held: {len(calls)} call(s), waiting for the lock: {JOB_LOCKS._locks[KEY][1] == 2}")
        while not calls and loop.time() < deadline:
            await asyncio.sleep(0.01)
        seen.append(f"after release: {len(calls)} call(s)")
        return seen

    assert asyncio.run(scenario()) == ["while held: 0 call(s), waiting for the lock: True", "after release: 1 call(s)"]


def test_handlers_mirror_and_claims_timer_share_one_lock_per_job() -> None:
    assert handlers.JOB_LOCKS is JOB_LOCKS
    assert mirror.JOB_LOCKS is JOB_LOCKS
    assert binding.JOB_LOCKS is JOB_LOCKS


@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One create/resync slot, and creates that only record the job's name."""
    created: list[str] = []

    async def record(job: dict) -> None:
        created.append(job["metadata"]["name"])

    monkeypatch.setattr(handlers, "_JOB_SLOTS", asyncio.Semaphore(1))
    monkeypatch.setitem(handlers.ACTIONS, Action.CREATE, record)
    return created


def _while_the_slots_are_taken(start: Callable[[], Awaitable[None]], created: list[str],
                               mirrored: list[tuple]) -> list[str]:
    """Take every slot (other jobs' creates), start the path, mirror the same job, then free the slots."""

    async def scenario() -> list[str]:
        seen = []
        async with handlers._JOB_SLOTS:
            task = asyncio.create_task(start())
            for _ in range(20):
                await asyncio.sleep(0)
            mirror_done, _ = await asyncio.wait(
                [asyncio.create_task(mirror.export_job_event(namespace=KEY[0], labels={JOB_LABEL: KEY[1]}))],
                timeout=30)  # returns as soon as the mirror is done; generous for a busy machine
            seen.append(f"slots taken: created={created}, mirrored={len(mirrored)}, "
                        f"mirror done={bool(mirror_done)}, path done={task.done()}")
        await asyncio.wait_for(task, 30)
        seen.append(f"slot freed: created={created}")
        return seen

    return asyncio.run(scenario())


def test_job_queued_for_a_slot_does_not_hold_its_lock(one_slot: list[str], mirrored: list[tuple]) -> None:
    body = {"metadata": {"namespace": KEY[0], "name": KEY[1], "uid": "uid-tiny", "generation": 1}, "spec": {}}
    async def event_and_its_create() -> None:
        await handlers.grpojob_event(event={"type": "ADDED"}, body=body, namespace=KEY[0], name=KEY[1],
                                     uid="uid-tiny")
        await handlers.WAITING.idle()

    seen = _while_the_slots_are_taken(event_and_its_create, one_slot, mirrored)
    assert seen == ["slots taken: created=[], mirrored=1, mirror done=True, path done=False",
                    "slot freed: created=['tiny']"]


def test_retry_queued_for_a_slot_does_not_hold_the_jobs_lock(monkeypatch: pytest.MonkeyPatch, one_slot: list[str],
                                                             mirrored: list[tuple]) -> None:
    async def get_grpojob(namespace: str, name: str) -> dict:
        return {"metadata": {"namespace": namespace, "name": name, "generation": 1}, "spec": {}}

    monkeypatch.setattr(handlers.kube, "get_grpojob", get_grpojob)
    seen = _while_the_slots_are_taken(lambda: handlers._retry(*KEY), one_slot, mirrored)
    assert seen == ["slots taken: created=[], mirrored=1, mirror done=True, path done=False",
                    "slot freed: created=['tiny']"]


def test_a_create_gives_its_slot_back_once_its_children_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    """What follows creation (the status write, the Event) needs the job's lock, not a slot: with one slot, the
    next job's create starts while the first one still writes its status."""
    monkeypatch.setattr(handlers, "_JOB_SLOTS", asyncio.Semaphore(1))
    order: list[str] = []
    second_done = asyncio.Event()

    async def create(job: dict) -> None:
        name = job["metadata"]["name"]
        order.append(f"{name} created its children")
        handlers._release_slot()
        if name == "first":
            await asyncio.wait_for(second_done.wait(), 30)  # its status write waits for the second job's create
        order.append(f"{name} wrote its status")
        second_done.set()

    monkeypatch.setitem(handlers.ACTIONS, Action.CREATE, create)

    def event(name: str) -> Awaitable[None]:
        body = {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "generation": 1}, "spec": {}}
        return handlers.grpojob_event(event={"type": "ADDED"}, body=body, namespace="ns", name=name,
                                      uid=f"uid-{name}")

    async def scenario() -> None:
        await asyncio.gather(event("first"), event("second"))
        await handlers.WAITING.idle()

    asyncio.run(scenario())
    assert order == ["first created its children", "second created its children", "second wrote its status",
                     "first wrote its status"]
    assert handlers._JOB_SLOTS._value == 1  # given back once, not twice


def _job_event(name: str, version: str, spec: dict, kind: str = "ADDED") -> Awaitable[None]:
    body = {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "generation": 1,
                         "resourceVersion": version}, "spec": spec}
    return handlers.grpojob_event(event={"type": kind}, body=body, namespace="ns", name=name, uid=f"uid-{name}")


def test_a_job_waiting_for_a_slot_is_held_as_its_key_and_created_once_as_its_newest_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's handler returns while the job waits (its body goes); an edit that arrives meanwhile is what gets
    created, once."""
    monkeypatch.setattr(handlers, "_JOB_SLOTS", asyncio.Semaphore(1))
    created: list[tuple[str, dict]] = []

    async def record(job: dict) -> None:
        created.append((job["metadata"]["name"], job["spec"]))

    monkeypatch.setitem(handlers.ACTIONS, Action.CREATE, record)

    async def scenario() -> list[bool]:
        returned = []
        async with handlers._JOB_SLOTS:
            for version, spec in (("10", {"model": "a"}), ("11", {"model": "b"})):
                handler = asyncio.create_task(_job_event("edited", version, spec))
                done, _ = await asyncio.wait([handler], timeout=30)
                returned.append(bool(done))
            assert created == []
        await handlers.WAITING.idle()
        return returned

    assert asyncio.run(scenario()) == [True, True]
    assert created == [("edited", {"model": "b"})]
    handlers.kube.JOBS.forget("ns", "edited")


def test_a_job_deleted_while_it_waits_for_a_slot_is_not_created(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "_JOB_SLOTS", asyncio.Semaphore(1))
    created: list[str] = []

    async def record(job: dict) -> None:
        created.append(job["metadata"]["name"])

    monkeypatch.setitem(handlers.ACTIONS, Action.CREATE, record)

    async def scenario() -> None:
        async with handlers._JOB_SLOTS:
            await _job_event("gone", "20", {})
            await _job_event("gone", "21", {}, kind="DELETED")
        await handlers.WAITING.idle()

    asyncio.run(scenario())
    assert created == []


class _Body(dict):
    """A job body that can be weakly referenced (a dict cannot), to see who still holds it."""


def test_a_job_acted_on_after_its_slot_wait_is_held_by_the_action_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a burst, create() waits for its status write behind later jobs' creates: the body it was handed must not
    stay alive in the slot waiter meanwhile (create() lets go of its own before that wait)."""
    kept = handlers.kube.JOBS.get
    monkeypatch.setattr(handlers.kube.JOBS, "get", lambda namespace, name: _Body(kept(namespace, name) or {}))
    alive: list[bool] = []

    async def create(job: dict) -> None:
        body = weakref.ref(job)
        del job
        gc.collect()
        alive.append(body() is not None)

    monkeypatch.setitem(handlers.ACTIONS, Action.CREATE, create)

    async def scenario() -> None:
        await _job_event("held", "30", {})
        await handlers.WAITING.idle()

    asyncio.run(scenario())
    assert alive == [False]
    handlers.kube.JOBS.forget("ns", "held")
