"""The start-up cuts: TransferQueue started beside the TaskRunner (cli; its starter is proved on a real Ray in
test_transfer_queue_start.py) and verl's agent-loop workers and load balancer started in the TaskRunner's
constructor (grpo_trainer.startup.agent_loop, task_runner_actor), each with its kill switch and its fallback to verl's
own start-up.

No Ray cluster: Ray's calls are replaced by recorders, and grpo_trainer.startup.agent_loop is imported over small
fakes of the three verl classes it wraps (the real ones need rollout servers); what they prove is our logic
around verl's calls."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from grpo_trainer import cli
from grpo_trainer.startup import task_runner
from grpo_trainer.startup.task_runner import Preload, preload_plan
from omegaconf import DictConfig, open_dict


def _v1_config(verl_defaults: DictConfig, num_workers: int = 3) -> DictConfig:
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.trainer.use_v1 = True
        cfg.actor_rollout_ref.rollout.agent.num_workers = num_workers
    return cfg


# ------------------------------------------------------------------- the plan and the kill switch


def test_the_number_of_warm_workers_follows_the_rollout_agent_num_workers(verl_defaults: DictConfig) -> None:
    assert preload_plan(_v1_config(verl_defaults, 3)).agent_loop_workers == 3
    assert preload_plan(_v1_config(verl_defaults, 5)).agent_loop_workers == 5


def test_a_custom_agent_loop_manager_gets_no_warm_workers(verl_defaults: DictConfig) -> None:
    # its own class creates its workers its own way: workers started for verl's would be wasted
    cfg = _v1_config(verl_defaults, 4)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class = "my.pkg.Manager"
    assert preload_plan(cfg).agent_loop_workers == 0


def test_the_warm_balancer_is_planned_with_the_rollouts_full_determinism(verl_defaults: DictConfig) -> None:
    cfg = _v1_config(verl_defaults)
    assert preload_plan(cfg).full_determinism is False
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.full_determinism = True
    assert preload_plan(cfg).full_determinism is True


class _RecordedActor:
    """Stands in for the Ray actor class: records its creation in the run's order of events."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def options(self, **options: Any) -> _RecordedActor:
        return self

    def remote(self, *args: Any) -> str:
        self.calls.append("actor created")
        return "handle"


def _runner_and_calls(
    config: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> tuple[task_runner.EarlyTaskRunner, list[Any]]:
    calls: list[Any] = []
    def start_transfer_queue(settings: Any, options: Any, one_round: bool) -> None:
        # its starter only waits, on the head node like the TaskRunner: no CPU of the node's taken
        assert options == {"num_cpus": 0, "resources": {cli.HEAD_NODE_RESOURCE: 0.001}}
        calls.append(("tq", settings, one_round))

    monkeypatch.setattr(cli, "start_transfer_queue", start_transfer_queue)
    monkeypatch.setattr(cli, "start_model_info", lambda config, environ: calls.append("model info"))
    runner = cli.task_runner_class(config, lambda: calls.append("prepare data"))
    return dataclasses.replace(runner, actor_class=_RecordedActor(calls)), calls


def test_by_default_transfer_queue_starts_beside_the_task_runner_before_the_data_is_prepared(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cli.WARM_START_ENV, raising=False)
    monkeypatch.delenv(cli.ONE_ROUND_ENV, raising=False)
    runner, calls = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)
    (plan,) = runner.init_args
    assert plan.agent_loop_workers == 3 and plan.transfer_queue_early
    assert runner.remote() == "handle"
    # vLLM's model-class inspection starts on the GPU nodes beside it (grpo_trainer.startup.vllm_model_info)
    assert calls == ["actor created", ("tq", plan.transfer_queue, True), "model info", "prepare data"]


def test_one_round_off_is_passed_to_the_starter(verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.ONE_ROUND_ENV, "0")
    runner, calls = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)
    runner.create()
    assert calls == ["actor created", ("tq", runner.init_args[0].transfer_queue, False), "model info"]


def test_an_actor_created_early_is_the_one_run_ppo_gets_and_the_data_waits_for_run_ppo(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # grpo_trainer.startup.ray_start creates the actor before verl is imported: TransferQueue starts beside it then,
    # the data is prepared only when run_ppo asks for the actor, and no second actor is created
    monkeypatch.delenv(cli.WARM_START_ENV, raising=False)
    monkeypatch.delenv(cli.ONE_ROUND_ENV, raising=False)
    runner, calls = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)
    assert runner.create() == "handle"
    assert calls == ["actor created", ("tq", runner.init_args[0].transfer_queue, True), "model info"]
    assert runner.remote() == "handle"
    assert calls[3:] == ["prepare data"]


def test_run_ppo_options_for_an_actor_created_early_are_an_error_not_ignored(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _ = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)
    runner.create()
    with pytest.raises(RuntimeError, match="nsight"):
        runner.options(runtime_env={"nsight": {}}).remote()


def test_the_kill_switch_turns_the_warm_path_off(verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.WARM_START_ENV, "0")
    runner, calls = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)
    (plan,) = runner.init_args
    assert plan.agent_loop_workers == 0  # the constructor starts no workers: verl creates its own
    assert not plan.transfer_queue_early
    assert plan.transfer_queue is not None  # the constructor still starts TransferQueue, as before
    runner.remote()
    assert calls == ["actor created", "prepare data"]  # no TransferQueue or vLLM model info started beside it


@pytest.mark.parametrize(("warm_start", "expected"), [("1", ["model info"]), ("0", [])])
def test_verls_older_task_runner_gets_the_model_info_start_too_unless_the_warm_start_is_off(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch, warm_start: str, expected: list[str]
) -> None:
    monkeypatch.setenv(cli.WARM_START_ENV, warm_start)
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.trainer.use_v1 = False
    calls: list[str] = []
    monkeypatch.setattr(cli, "start_model_info", lambda config, environ: calls.append("model info"))
    cli.task_runner_class(cfg).on_created()
    assert calls == expected


# ------------------------------------------------------------------- TransferQueue beside the TaskRunner


def test_transfer_queue_started_early_is_stopped_even_when_the_run_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import verl.trainer.main_ppo
    from grpo_trainer import worker_setup

    def failing_run(config: Any, task_runner_class: Any) -> None:
        raise RuntimeError("step 1 failed")

    stopped: list[bool] = []
    monkeypatch.setattr(verl.trainer.main_ppo, "run_ppo", failing_run)
    monkeypatch.setattr(worker_setup, "setup_worker", lambda: None)
    monkeypatch.setattr(cli, "task_runner_class", lambda config, before_run: None)
    monkeypatch.setattr(cli.ray_start, "start", lambda config, runner, environ: None)
    monkeypatch.setattr(cli, "validate_with_verl", lambda config: None)
    monkeypatch.setattr(cli, "stop_transfer_queue", lambda: stopped.append(True))
    with pytest.raises(RuntimeError, match="step 1 failed"):
        cli.run(SimpleNamespace(verl=None))  # type: ignore[arg-type]
    assert stopped == [True]


# ------------------------------------------------------------------- the TaskRunner's constructor


@pytest.fixture()
def warm_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A fake grpo_trainer.startup.agent_loop, as task_runner_actor finds it (import or sys.modules)."""
    import grpo_trainer.startup
    from grpo_trainer.startup import task_runner_actor

    module = types.ModuleType("grpo_trainer.startup.agent_loop")
    module.calls = []  # type: ignore[attr-defined]
    module.prestart_load_balancer = lambda full_determinism, preimport=(): module.calls.append(  # type: ignore[attr-defined]
        ("balancer", full_determinism, *preimport)
    )

    def prestart(n: int) -> int:
        module.calls.append(("workers", n))  # type: ignore[attr-defined]
        return n

    module.prestart = prestart  # type: ignore[attr-defined]
    module.discard_unused_balancer = lambda: module.calls.append("discard balancer")  # type: ignore[attr-defined]
    module.WarmAgentLoopManager = SimpleNamespace(  # type: ignore[attr-defined]
        create=lambda **kwargs: module.calls.append(("warm manager", kwargs)) or "warm manager"
    )
    monkeypatch.setitem(sys.modules, "grpo_trainer.startup.agent_loop", module)
    monkeypatch.setattr(grpo_trainer.startup, "agent_loop", module, raising=False)
    monkeypatch.setattr(task_runner_actor, "run_preload", lambda plan: {"imports": 1.0})
    monkeypatch.setattr(
        task_runner_actor, "join_transfer_queue", lambda plan: module.calls.append("transfer queue joined") or {}
    )
    # verl's own manager path, recorded instead of run
    base = task_runner_actor.GrpoTaskRunnerV1.__mro__[1]
    monkeypatch.setattr(base, "init_agent_loop_manager", lambda self: module.calls.append("verl's own manager"))
    return module


def _plan(workers: int) -> Preload:
    return Preload(modules=(), trainer_mode=None, rollout_engine=None, transfer_queue=None, agent_loop_workers=workers)


def _runner_with_trainer(plan: Preload) -> Any:
    from grpo_trainer.startup.task_runner_actor import GrpoTaskRunnerV1

    runner = GrpoTaskRunnerV1(plan)
    runner.config = "the config"
    runner.trainer = SimpleNamespace(
        get_llm_client=lambda: "llm", get_teacher_client=lambda: "teacher", get_reward_handles=lambda: ["reward"]
    )
    return runner


def test_warm_workers_started_in_the_constructor_are_given_to_the_warm_manager(warm_module: Any) -> None:
    runner = _runner_with_trainer(_plan(4))
    runner.init_agent_loop_manager()
    assert warm_module.calls == [
        ("balancer", False),
        ("workers", 4),
        "transfer queue joined",  # last in the constructor: the workers' processes need none of it
        "discard balancer",  # the rollout servers are up: an untaken balancer is not left idle
        (
            "warm manager",
            {
                "config": "the config",
                "llm_client": "llm",
                "teacher_client": "teacher",
                "reward_loop_worker_handles": ["reward"],
            },
        ),
    ]
    assert runner.agent_loop_manager == "warm manager"


def test_a_failure_of_the_warm_path_falls_back_to_verls_own(
    warm_module: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(n: int) -> int:
        raise RuntimeError("no CPU for the workers")

    warm_module.prestart = fail
    runner = _runner_with_trainer(_plan(4))  # the constructor does not fail
    out = capsys.readouterr().out
    assert "agent loop workers not started early" in out
    assert task_runner.PREPARED_LINE in out  # the start-up line is still printed
    assert warm_module.calls[-1] == "transfer queue joined"  # and TransferQueue still joined
    runner.init_agent_loop_manager()
    assert warm_module.calls[-1] == "verl's own manager"
    assert not any(call[0] == "warm manager" for call in warm_module.calls if isinstance(call, tuple))


def test_the_warm_balancer_is_asked_to_import_the_rollout_servers_module(
    warm_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grpo_trainer.startup import task_runner_actor

    modules = {"vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server"}
    monkeypatch.setattr(task_runner_actor, "rollout_server_module", lambda engine: modules.get(engine))
    plan = dataclasses.replace(_plan(2), rollout_engine="vllm")
    _runner_with_trainer(plan)
    assert warm_module.calls[0] == ("balancer", False, "verl.workers.rollout.vllm_rollout.vllm_async_server")
    warm_module.calls.clear()
    _runner_with_trainer(dataclasses.replace(plan, warm_server_import=False))  # GRPO_WARM_SERVER_IMPORT=0
    assert warm_module.calls[0] == ("balancer", False)


def test_no_warm_workers_are_started_when_the_plan_has_none(warm_module: Any) -> None:
    runner = _runner_with_trainer(_plan(0))  # the kill switch, or a custom manager
    runner.init_agent_loop_manager()
    assert warm_module.calls == ["transfer queue joined", "discard balancer", "verl's own manager"]


# ------------------------------------------------------------------- grpo_trainer.startup.agent_loop over fakes


class _FakeVerlWorker:
    def __init__(self, config: Any, llm_client: Any, teacher_client: Any, reward_handles: Any) -> None:
        self.bound_with = (config, llm_client, teacher_client, reward_handles)


class _FakeManager:  # verl's AgentLoopManagerTQ: what WarmAgentLoopManager reads and the method it overrides
    def __init__(self, num_workers: int) -> None:
        self.rollout_config = SimpleNamespace(agent=SimpleNamespace(num_workers=num_workers))
        self.config, self.llm_client, self.teacher_client = "config", "llm", "teacher"
        self.reward_loop_worker_handles = ["reward"]
        self.agent_loop_workers: Any = None

    async def _init_agent_loop_workers(self) -> None:
        self.agent_loop_workers = "verl's own workers"


class _FakeServerManager:  # verl's LLMServerManager: what _take_balancer reads
    def __init__(self, worker_group: Any = "hybrid", router_config_path: Any = None, full_determinism: bool = False):
        self.worker_group = worker_group
        self._load_balancer_cls = None
        self.rollout_config = SimpleNamespace(router_config_path=router_config_path, full_determinism=full_determinism)
        self.server_addresses, self.server_handles = ["10.0.0.1:8000", "10.0.0.2:8000"], ["s1", "s2"]
        self.global_load_balancer: Any = None

    async def _init_global_load_balancer(self) -> None:
        self.global_load_balancer = "verl's own balancer"


class _Handle:
    """A Ray actor handle: `handle.method.remote(...)` awaits to the method's result."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.calls = name, fail, []  # type: ignore[var-annotated]
        self.bind = self.add_servers = SimpleNamespace(remote=self._remote)
        self.ray_calls: list[tuple[Any, ...]] = []  # `__ray_call__.remote(fn, *args)`, not awaited
        self.__ray_call__ = SimpleNamespace(remote=lambda *args: self.ray_calls.append(args))

    async def _remote(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(args)
        if self.fail:
            raise RuntimeError(f"{self.name} died")


@pytest.fixture()
def agent_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """grpo_trainer.startup.agent_loop imported afresh over fakes of verl's modules; ray.kill recorded."""
    import grpo_trainer.startup
    import ray

    fakes = {
        "verl.trainer.ppo.v1.agent_loop_tq": {
            "AgentLoopManagerTQ": _FakeManager,
            "AgentLoopWorkerTQ": SimpleNamespace(__ray_actor_class__=_FakeVerlWorker),
        },
        "verl.workers.rollout.llm_server": {"LLMServerManager": _FakeServerManager},
        "verl.workers.rollout.router": {
            "DEFAULT_ROUTING_CACHE_SIZE": 128,
            "GlobalRequestLoadBalancer": type("GlobalRequestLoadBalancer", (), {}),
        },
    }
    for name, attrs in fakes.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    # the patch prestart_load_balancer installs lands on this test's class, not on another test's
    monkeypatch.setattr(_FakeServerManager, "_init_global_load_balancer", _FakeServerManager._init_global_load_balancer)
    old = sys.modules.pop("grpo_trainer.startup.agent_loop", None)
    monkeypatch.setattr(grpo_trainer.startup, "agent_loop", None, raising=False)
    killed: list[Any] = []
    monkeypatch.setattr(ray, "kill", killed.append)
    try:
        module = importlib.import_module("grpo_trainer.startup.agent_loop")
        module.killed = killed
        yield module
    finally:
        sys.modules.pop("grpo_trainer.startup.agent_loop", None)
        if old is not None:
            sys.modules["grpo_trainer.startup.agent_loop"] = old


def test_prestart_starts_the_asked_number_round_robin_over_alive_cpu_nodes(
    agent_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    a, b = "a" * 56, "b" * 56  # Ray checks the hex form of node ids
    nodes = [
        {"NodeID": a, "Alive": True, "Resources": {"CPU": 8.0}},
        {"NodeID": "dead", "Alive": False, "Resources": {"CPU": 8.0}},
        {"NodeID": "no-cpu", "Alive": True, "Resources": {"GPU": 8.0}},
        {"NodeID": b, "Alive": True, "Resources": {"CPU": 8.0}},
    ]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    placed: list[Any] = []
    fake_actor = SimpleNamespace(
        options=lambda **o: SimpleNamespace(remote=lambda: placed.append(o["scheduling_strategy"]) or len(placed))
    )
    monkeypatch.setattr(agent_loop, "_WarmWorker", fake_actor)
    assert agent_loop.prestart(0) == 0 and placed == []
    assert agent_loop.prestart(3) == 3
    assert [(s.node_id, s.soft) for s in placed] == [(a, True), (b, True), (a, True)]
    assert agent_loop._warm == [1, 2, 3]


def test_bind_runs_verls_worker_constructor_with_verls_arguments(agent_loop: Any) -> None:
    worker = agent_loop.GrpoAgentLoopWorkerTQ()  # started early: nothing of verl's run yet
    assert not hasattr(worker, "bound_with")
    worker.bind("config", "llm", "teacher", ["reward"])
    assert worker.bound_with == ("config", "llm", "teacher", ["reward"])


def test_the_warm_manager_binds_the_warm_workers(agent_loop: Any, capsys: pytest.CaptureFixture[str]) -> None:
    workers = [_Handle("w0"), _Handle("w1")]
    agent_loop._warm.extend(workers)
    manager = agent_loop.WarmAgentLoopManager(2)
    asyncio.run(manager._init_agent_loop_workers())
    assert manager.agent_loop_workers == workers
    assert all(w.calls == [("config", "llm", "teacher", ["reward"])] for w in workers)
    assert agent_loop.BOUND_LINE in capsys.readouterr().out
    assert agent_loop.killed == []


def test_warm_workers_that_fail_to_bind_are_removed_and_verl_creates_its_own(agent_loop: Any) -> None:
    workers = [_Handle("w0"), _Handle("w1", fail=True)]
    agent_loop._warm.extend(workers)
    manager = agent_loop.WarmAgentLoopManager(2)
    asyncio.run(manager._init_agent_loop_workers())
    assert manager.agent_loop_workers == "verl's own workers"
    assert agent_loop.killed == workers


def test_warm_workers_of_another_count_than_verls_are_removed_and_verl_creates_its_own(agent_loop: Any) -> None:
    workers = [_Handle("w0"), _Handle("w1")]
    agent_loop._warm.extend(workers)
    manager = agent_loop.WarmAgentLoopManager(3)  # the config asks for 3 now
    asyncio.run(manager._init_agent_loop_workers())
    assert manager.agent_loop_workers == "verl's own workers"
    assert agent_loop.killed == workers
    assert agent_loop._warm == [] and all(w.calls == [] for w in workers)


def _prestarted_balancer(agent_loop: Any, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> _Handle:
    import ray

    balancer = _Handle("balancer", fail=fail)
    started: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "remote", lambda cls: SimpleNamespace(remote=lambda **kw: started.append(kw) or balancer))
    agent_loop.prestart_load_balancer(False)
    assert started == [{"servers": {}, "max_cache_size": 128, "full_determinism": False}]  # verl's defaults
    return balancer


def test_the_warm_balancer_imports_the_server_module_before_it_is_handed_the_servers(
    agent_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from grpo_trainer.startup.task_runner import import_in_actor

    balancer = _Handle("balancer")
    monkeypatch.setattr(ray, "remote", lambda cls: SimpleNamespace(remote=lambda **kw: balancer))
    agent_loop.prestart_load_balancer(False, ("verl.workers.rollout.vllm_rollout.vllm_async_server",))
    assert balancer.ray_calls == [(import_in_actor, ("verl.workers.rollout.vllm_rollout.vllm_async_server",))]
    agent_loop.discard_unused_balancer()
    balancer = _Handle("balancer")
    agent_loop.prestart_load_balancer(False)  # nothing to import: no call at all
    assert balancer.ray_calls == []


def test_the_training_rollout_takes_the_warm_balancer_with_its_servers_added(
    agent_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    balancer = _prestarted_balancer(agent_loop, monkeypatch)
    manager = _FakeServerManager()
    asyncio.run(manager._init_global_load_balancer())
    assert manager.global_load_balancer is balancer
    assert balancer.calls == [({"10.0.0.1:8000": "s1", "10.0.0.2:8000": "s2"},)]
    agent_loop.discard_unused_balancer()  # taken: nothing left to remove
    assert agent_loop.killed == []


@pytest.mark.parametrize(
    "manager",
    [
        _FakeServerManager(router_config_path="router.yaml"),  # a router plugin
        _FakeServerManager(worker_group=None),  # standalone servers (separate_async)
        _FakeServerManager(full_determinism=True),  # another balancer than the one started
    ],
    ids=["router-plugin", "standalone", "full-determinism-differs"],
)
def test_other_managers_get_verls_own_balancer_and_the_unused_one_is_removed(
    agent_loop: Any, monkeypatch: pytest.MonkeyPatch, manager: _FakeServerManager
) -> None:
    balancer = _prestarted_balancer(agent_loop, monkeypatch)
    asyncio.run(manager._init_global_load_balancer())
    assert manager.global_load_balancer == "verl's own balancer"
    assert balancer.calls == []
    agent_loop.discard_unused_balancer()
    assert agent_loop.killed == [balancer]


def test_a_warm_balancer_that_fails_to_take_servers_is_removed_and_verl_starts_its_own(
    agent_loop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    balancer = _prestarted_balancer(agent_loop, monkeypatch, fail=True)
    manager = _FakeServerManager()
    asyncio.run(manager._init_global_load_balancer())
    assert manager.global_load_balancer == "verl's own balancer"
    assert agent_loop.killed == [balancer]


# ------------------------------------------------------------------- the rollout server's module, imported early


def test_the_balancer_imports_the_server_module_only_when_warm_workers_start_and_the_switch_is_on() -> None:
    module = "verl.workers.rollout.vllm_rollout.vllm_async_server"
    assert task_runner.balancer_imports(_plan(8), module) == (module,)
    assert task_runner.balancer_imports(dataclasses.replace(_plan(8), warm_server_import=False), module) == ()
    assert task_runner.balancer_imports(_plan(0), module) == ()  # no warm balancer at all
    assert task_runner.balancer_imports(_plan(8), None) == ()  # no rollout engine, or its module not found


def test_the_server_import_switch_reaches_the_plan(verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.WARM_START_ENV, raising=False)
    monkeypatch.delenv(cli.WARM_SERVER_IMPORT_ENV, raising=False)
    (plan,) = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)[0].init_args
    assert plan.warm_server_import
    monkeypatch.setenv(cli.WARM_SERVER_IMPORT_ENV, "0")
    (plan,) = _runner_and_calls(_v1_config(verl_defaults, 3), monkeypatch)[0].init_args
    assert not plan.warm_server_import and plan.agent_loop_workers == 3  # the rest of the warm start stays


def test_import_in_actor_imports_the_modules_in_its_process(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "grpo_t3_probe_module.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "grpo_t3_probe_module", raising=False)
    seconds = task_runner.import_in_actor(object(), ("grpo_t3_probe_module",))
    assert sys.modules["grpo_t3_probe_module"].LOADED and seconds >= 0
