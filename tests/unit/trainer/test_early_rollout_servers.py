"""The training rollout's vLLM servers started in the TaskRunner's constructor (grpo_trainer.startup.early_servers,
grpo_trainer.startup.rollout_server, task_runner_actor.start_rollout_servers), each path with its fallback to
verl's own servers.

No Ray cluster and no vLLM in this venv: grpo_trainer.startup.rollout_server is imported over small fakes of the two
verl classes it wraps (vLLMHttpServer, vLLMReplica), and Ray's calls are recorded. What the tests prove is
our logic around verl's calls; the GPU bench runs the real ones (bench/gpu/RESULTS.md)."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from grpo_trainer import cli
from grpo_trainer.startup.early_servers import (
    EarlyServers,
    actor_node,
    asked_options,
    early_options,
    options_mismatch,
    plan_early_servers,
)
from grpo_trainer.startup.task_runner import Preload, preload_plan
from omegaconf import DictConfig, open_dict
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

N1, N2 = "a1" * 28, "b2" * 28  # Ray checks the hex form of node ids


def _config(gpus: int = 1, tp: int = 1, nnodes: int = 1, name: str = "vllm", **rollout: Any) -> dict[str, Any]:
    return {
        "actor_rollout_ref": {
            "hybrid_engine": True,
            "rollout": {
                "name": name,
                "tensor_model_parallel_size": tp,
                "data_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "max_num_seqs": 256,
                "disaggregation": {"enabled": False},
                **rollout,
            },
        },
        "trainer": {"nnodes": nnodes, "n_gpus_per_node": gpus},
    }


# ------------------------------------------------------------------------------------------ the plan


def test_one_server_per_rollout_replica_of_the_one_actor_node_named_as_verl_names_them() -> None:
    plan, _ = plan_early_servers(_config(gpus=1, tp=1))
    assert plan == EarlyServers(names=("vllm_server_0_0",), gpus_per_node=1, max_concurrency=1000)
    plan, _ = plan_early_servers(_config(gpus=8, tp=2))
    assert plan is not None and plan.names == tuple(f"vllm_server_{r}_0" for r in range(4))


def test_the_concurrency_is_verls_for_many_sequences() -> None:
    plan, _ = plan_early_servers(_config(max_num_seqs=2048))
    assert plan is not None and plan.max_concurrency == 2048 + 16


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (_config(name="sglang"), "not vllm"),
        (_config(nnodes=2), "trainer.nnodes=2"),
        (_config(gpus=8, tp=3), "do not divide"),
        (_config(gpus=4, tp=8), "do not divide"),
        (_config(disaggregation={"enabled": True}), "disaggregation"),
    ],
)
def test_no_servers_are_planned_where_their_name_or_node_is_not_known_before_the_run(
    config: dict[str, Any], why: str
) -> None:
    plan, reason = plan_early_servers(config)
    assert plan is None and why in reason


def test_a_trainer_without_hybrid_replicas_gets_no_early_servers() -> None:
    config = _config()
    config["actor_rollout_ref"]["hybrid_engine"] = False
    plan, reason = plan_early_servers(config)
    assert plan is None and "hybrid_engine" in reason


def test_the_names_and_the_concurrency_are_verls(verl_defaults: DictConfig) -> None:
    # verl's own text: a verl that names its servers otherwise makes every early server fall back, so the
    # cut would silently be lost; this fails first
    import verl
    from grpo_trainer.startup import early_servers
    from verl.workers.rollout.replica import CONTROL_METHOD_CONCURRENCY

    source = (Path(verl.__file__).parent / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    assert 'name = f"{prefix}server_{self.replica_rank}_{node_rank}{self.name_suffix}"' in source
    assert 'return "vllm_"' in source
    # the options launch_servers gives the server, which the early server's must equal
    launch = source[source.index("async def launch_servers") :]
    options = launch[launch.index("self.server_class.options(") : launch.index(").remote(")]
    assert [line.strip() for line in options.splitlines()[1:] if line.strip()] == [
        "scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(",
        "node_id=node_id,",
        "soft=False,",
        "),",
        'runtime_env={"env_vars": env_vars},',
        "name=name,",
        "max_concurrency=self.max_concurrency,",
    ]
    assert early_servers.CONTROL_METHOD_CONCURRENCY == CONTROL_METHOD_CONCURRENCY


def test_the_node_is_the_one_alive_node_with_the_pools_gpus_and_the_actor_resource() -> None:
    plan = EarlyServers(names=("vllm_server_0_0",), gpus_per_node=8, max_concurrency=1000)
    head = {"NodeID": "head", "Alive": True, "Resources": {"CPU": 8.0}}
    actor = {"NodeID": "actor", "Alive": True, "Resources": {"GPU": 8.0, "grpo.dev/actor": 8.0}}
    reward = {"NodeID": "reward", "Alive": True, "Resources": {"GPU": 8.0, "grpo.dev/reward": 8.0}}
    dead = {"NodeID": "dead", "Alive": False, "Resources": {"GPU": 8.0, "grpo.dev/actor": 8.0}}
    assert actor_node([head, actor, reward, dead], plan, "grpo.dev/actor") == "actor"
    assert actor_node([head, actor, dead], plan, None) == "actor"
    # two nodes could hold the pool: which one verl's placement group takes is not known yet
    assert actor_node([head, actor, reward], plan, None) is None
    assert actor_node([head, {**actor, "Resources": {"GPU": 4.0, "grpo.dev/actor": 4.0}}], plan, None) is None


def test_verls_options_are_compared_with_the_early_servers() -> None:
    early = early_options("vllm_server_0_0", N1, {"NCCL_CUMEM_ENABLE": "0"}, 1000)
    verl_asks = {
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=N1, soft=False),
        "runtime_env": {"env_vars": {"NCCL_CUMEM_ENABLE": "0"}},
        "name": "vllm_server_0_0",
        "max_concurrency": 1000,
    }
    assert options_mismatch(early, asked_options(verl_asks)) is None
    other_node = {**verl_asks, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=N2, soft=False)}
    assert "node_id" in (options_mismatch(early, asked_options(other_node)) or "")
    more = {**verl_asks, "num_gpus": 1}  # an option verl 0.9.1 does not give: not ours to stand in for
    assert "num_gpus" in (options_mismatch(early, asked_options(more)) or "")
    env = {**verl_asks, "runtime_env": {"env_vars": {"NCCL_CUMEM_ENABLE": "1"}}}
    assert "runtime_env" in (options_mismatch(early, asked_options(env)) or "")


# ------------------------------------------------------------------------ the plan in the TaskRunner's Preload


def _v1(verl_defaults: DictConfig) -> DictConfig:
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.trainer.use_v1 = True
        cfg.trainer.n_gpus_per_node = 1
        cfg.actor_rollout_ref.rollout.name = "vllm"
        cfg.actor_rollout_ref.rollout.tensor_model_parallel_size = 1
    return cfg


def test_the_preload_plans_the_servers_of_the_config(verl_defaults: DictConfig) -> None:
    plan = preload_plan(_v1(verl_defaults))
    assert plan.early_servers is not None and plan.early_servers.names == ("vllm_server_0_0",)
    no_engine = preload_plan(verl_defaults)  # verl's defaults name no rollout engine
    assert no_engine.early_servers is None and "not vllm" in no_engine.early_servers_skipped


@pytest.mark.parametrize("switch", [cli.EARLY_ROLLOUT_SERVERS_ENV, cli.WARM_START_ENV])
def test_the_switches_turn_the_early_servers_off(
    switch: str, verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "start_transfer_queue", lambda settings: None)
    for env in (cli.EARLY_ROLLOUT_SERVERS_ENV, cli.WARM_START_ENV):
        monkeypatch.delenv(env, raising=False)
    (plan,) = cli.task_runner_class(_v1(verl_defaults)).init_args
    assert plan.early_servers is not None
    monkeypatch.setenv(switch, "0")
    (plan,) = cli.task_runner_class(_v1(verl_defaults)).init_args
    assert plan.early_servers is None and plan.early_servers_skipped == f"{switch}=0"


# ------------------------------------------------------------------------ the TaskRunner's constructor


class _FakeRolloutServerModule(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("grpo_trainer.startup.rollout_server")
        self.calls: list[Any] = []

    def prestart(self, plan: EarlyServers, node: str) -> list[str]:
        self.calls.append(("prestart", plan.names, node))
        return list(plan.names)

    def discard_unused(self) -> None:
        self.calls.append("discard")


@pytest.fixture()
def constructor(monkeypatch: pytest.MonkeyPatch) -> Any:
    import grpo_trainer.startup
    import ray
    from grpo_trainer.startup import task_runner_actor

    module = _FakeRolloutServerModule()
    monkeypatch.setitem(sys.modules, "grpo_trainer.startup.rollout_server", module)
    monkeypatch.setattr(grpo_trainer.startup, "rollout_server", module, raising=False)
    monkeypatch.setattr(task_runner_actor, "run_preload", lambda plan: {"imports": 1.0})
    monkeypatch.setattr(
        ray, "nodes", lambda: [{"NodeID": "gpu-node", "Alive": True, "Resources": {"GPU": 1.0, "CPU": 8.0}}]
    )
    monkeypatch.delenv("GRPO_ROLE_RESOURCES", raising=False)
    return SimpleNamespace(module=module, runner=task_runner_actor.GrpoTaskRunnerV1)


def _plan(early: EarlyServers | None, skipped: str = "") -> Preload:
    return Preload(
        modules=(), trainer_mode=None, rollout_engine=None, transfer_queue=None,
        early_servers=early, early_servers_skipped=skipped,
    )


ONE = EarlyServers(names=("vllm_server_0_0",), gpus_per_node=1, max_concurrency=1000)


def test_the_constructor_starts_the_planned_servers_on_the_actor_node(
    constructor: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    constructor.runner(_plan(ONE))
    assert constructor.module.calls == [("prestart", ("vllm_server_0_0",), "gpu-node")]
    assert "rollout servers started early: vllm_server_0_0 on node gpu-node" in capsys.readouterr().out


def test_with_the_actor_pinned_the_node_must_carry_the_actor_resource(
    constructor: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRPO_ROLE_RESOURCES", '{"actor": "grpo.dev/actor"}')
    constructor.runner(_plan(ONE))  # the one GPU node does not offer grpo.dev/actor
    assert constructor.module.calls == []
    assert "not started early: not exactly one alive node offers 1 GPUs and grpo.dev/actor" in capsys.readouterr().out


def test_without_a_plan_the_constructor_says_why_and_starts_nothing(
    constructor: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    constructor.runner(_plan(None, "trainer.nnodes=2: ..."))
    assert constructor.module.calls == []
    assert "rollout servers not started early: trainer.nnodes=2" in capsys.readouterr().out


def test_a_failed_early_start_does_not_fail_the_constructor(
    constructor: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(plan: EarlyServers, node: str) -> list[str]:
        raise RuntimeError("no CPU left on the node")

    constructor.module.prestart = fail
    constructor.runner(_plan(ONE))
    out = capsys.readouterr().out
    assert "rollout servers not started early: RuntimeError('no CPU left on the node')" in out
    assert "task runner prepared" in out


def test_servers_verl_did_not_ask_for_are_removed_once_its_servers_are_up(
    constructor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = constructor.runner.__mro__[1]
    monkeypatch.setattr(base, "init_agent_loop_manager", lambda self: constructor.module.calls.append("verl's"))
    runner = constructor.runner(_plan(ONE))
    constructor.module.calls.clear()
    runner.init_agent_loop_manager()
    assert constructor.module.calls == ["discard", "verl's"]


# ------------------------------------------------------------------ grpo_trainer.startup.rollout_server over fakes


class _FakeVerlServer:  # verl's vLLMHttpServer: its constructor's keywords
    def __init__(self, **kwargs: Any) -> None:
        self.bound_with = kwargs


class _FakeReplica:  # verl's vLLMReplica: what its constructor sets that the patch reads
    def __init__(
        self, replica_rank: int, is_reward_model: bool = False, is_teacher_model: bool = False, name_suffix: str = ""
    ) -> None:
        self.replica_rank = replica_rank
        self.is_reward_model, self.is_teacher_model = is_reward_model, is_teacher_model
        self.name_suffix = f"_{name_suffix}" if name_suffix else ""
        self.server_class = "verl's server class"


class _Handle:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.bound: list[dict[str, Any]] = []
        self.bind = SimpleNamespace(remote=self._bind)

    def _bind(self, **kwargs: Any) -> Any:
        if self.fail:
            raise RuntimeError("the early server died")
        self.bound.append(kwargs)
        return "bound"


class _VerlClass:  # ray.remote(vLLMHttpServer): verl's own creation, recorded
    def __init__(self, events: list[str] | None = None) -> None:
        self.created: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.events = events if events is not None else []

    def options(self, **options: Any) -> Any:
        def remote(**kwargs: Any) -> str:
            self.created.append((options, kwargs))
            self.events.append("verl creates its own")
            return "verl's server"

        return SimpleNamespace(remote=remote)


@pytest.fixture()
def rollout_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import grpo_trainer.startup
    import ray

    fakes = {
        "verl.workers.rollout.vllm_rollout.vllm_async_server": {
            "vLLMHttpServer": _FakeVerlServer,
            "vLLMReplica": _FakeReplica,
        },
        "verl.plugin.platform": {
            "get_platform": lambda: SimpleNamespace(
                ray_noset_envvars=lambda: ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"],
                rollout_env_vars=lambda: {"NCCL_CUMEM_ENABLE": "0"},
            )
        },
    }
    for name, attrs in fakes.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(_FakeReplica, "__init__", _FakeReplica.__init__)  # the patch lands on this test only
    killed: list[Any] = []
    events: list[str] = []  # kills, name lookups and verl's creations, in order
    gets: list[Any] = []

    def kill(handle: Any, no_restart: bool = True) -> None:
        killed.append(handle)
        events.append("kill")

    def get(ref: Any, timeout: float | None = None) -> Any:
        gets.append(timeout)
        return ref

    monkeypatch.setattr(ray, "kill", kill)
    monkeypatch.setattr(ray, "get", get)
    names_taken: set[str] = set()
    held_for_good: set[str] = set()

    def get_actor(name: str, namespace: str | None = None) -> Any:
        if name in held_for_good:
            events.append("name still held")
            return "still there"
        if name in names_taken:
            names_taken.discard(name)  # released once asked after the kill
            events.append("name still held")
            return "still there"
        events.append("name free")
        raise ValueError(name)

    monkeypatch.setattr(ray, "get_actor", get_actor)
    old = sys.modules.pop("grpo_trainer.startup.rollout_server", None)
    monkeypatch.setattr(grpo_trainer.startup, "rollout_server", None, raising=False)
    try:
        module = importlib.import_module("grpo_trainer.startup.rollout_server")
        module.killed, module.events, module.gets = killed, events, gets
        module.names_taken, module.held_for_good = names_taken, held_for_good
        yield module
    finally:
        sys.modules.pop("grpo_trainer.startup.rollout_server", None)
        if old is not None:
            sys.modules["grpo_trainer.startup.rollout_server"] = old


def _verl_options(node: str = N1) -> dict[str, Any]:
    return {
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        "runtime_env": {
            "env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "NCCL_CUMEM_ENABLE": "0"}
        },
        "name": "vllm_server_0_0",
        "max_concurrency": 1000,
    }


def _started_early(module: Any, handle: _Handle, node: str = N1) -> None:
    """What prestart leaves behind, with a recorded handle instead of a Ray actor."""
    options = early_options("vllm_server_0_0", node, module.server_env_vars(), 1000)
    module._early["vllm_server_0_0"] = (options, handle)


def test_the_early_server_is_bound_with_verls_arguments_and_handed_to_verl(
    rollout_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    handle, verl_class = _Handle(), _VerlClass()
    _started_early(rollout_server, handle)
    call = rollout_server._EarlyServerClass(verl_class).options(**_verl_options())
    assert call.remote(config="rollout config", replica_rank=0, cuda_visible_devices="0") is handle
    assert handle.bound == [{"config": "rollout config", "replica_rank": 0, "cuda_visible_devices": "0"}]
    assert verl_class.created == [] and rollout_server.killed == []
    assert rollout_server.BOUND_LINE in capsys.readouterr().out
    assert rollout_server._early == {}  # taken once
    assert rollout_server.gets == [rollout_server.BIND_TIMEOUT_S]  # a server that never comes up is given up


def test_bind_runs_verls_server_constructor(rollout_server: Any) -> None:
    server = rollout_server.GrpoVLLMHttpServer()  # started early: nothing of verl's yet
    assert not hasattr(server, "bound_with")
    server.bind(config="rollout config", replica_rank=0)
    assert server.bound_with == {"config": "rollout config", "replica_rank": 0}


def test_an_early_server_on_another_node_is_removed_before_verl_creates_its_own(rollout_server: Any) -> None:
    handle, verl_class = _Handle(), _VerlClass(rollout_server.events)
    _started_early(rollout_server, handle, node=N1)
    rollout_server.names_taken.add("vllm_server_0_0")  # the kill is seen by the name lookup only later
    created = rollout_server._EarlyServerClass(verl_class).options(**_verl_options(node=N2)).remote(replica_rank=0)
    assert created == "verl's server" and handle.bound == []
    assert rollout_server.killed == [handle]
    # verl's own is created only once the early one's name is free
    assert rollout_server.events == ["kill", "name still held", "name free", "verl creates its own"]
    ((options, kwargs),) = verl_class.created
    assert asked_options(options) == asked_options(_verl_options(node=N2)) and kwargs == {"replica_rank": 0}


def test_an_early_server_that_fails_to_bind_is_removed_and_verl_creates_its_own(rollout_server: Any) -> None:
    handle, verl_class = _Handle(fail=True), _VerlClass()
    _started_early(rollout_server, handle)
    created = rollout_server._EarlyServerClass(verl_class).options(**_verl_options()).remote(replica_rank=0)
    assert created == "verl's server" and rollout_server.killed == [handle]


def test_a_server_not_started_early_is_verls_own(rollout_server: Any) -> None:
    verl_class = _VerlClass()
    other = {**_verl_options(), "name": "vllm_server_1_0"}
    assert rollout_server._EarlyServerClass(verl_class).options(**other).remote(replica_rank=1) == "verl's server"
    assert rollout_server.killed == []


def test_only_the_training_rollouts_replicas_look_for_early_servers(rollout_server: Any) -> None:
    rollout_server.install()
    replica = rollout_server.vLLMReplica(replica_rank=0)
    assert isinstance(replica.server_class, rollout_server._EarlyServerClass)
    assert replica.server_class.verl_class == "verl's server class"
    assert rollout_server.vLLMReplica(replica_rank=0, is_reward_model=True).server_class == "verl's server class"
    assert rollout_server.vLLMReplica(replica_rank=0, is_teacher_model=True).server_class == "verl's server class"

    class PDReplica(rollout_server.vLLMReplica):  # verl's prefill/decode replicas name their servers otherwise
        pass

    assert PDReplica(replica_rank=0).server_class == "verl's server class"
    assert rollout_server.vLLMReplica(replica_rank=0, name_suffix="b").server_class == "verl's server class"


def test_early_servers_verl_never_asked_for_are_removed(rollout_server: Any) -> None:
    handle = _Handle()
    _started_early(rollout_server, handle)
    rollout_server.discard_unused()
    assert rollout_server.killed == [handle] and rollout_server._early == {}


def test_the_early_server_gets_verls_environment_and_options(rollout_server: Any, monkeypatch: Any) -> None:
    created: list[dict[str, Any]] = []
    fake_actor = SimpleNamespace(options=lambda **o: SimpleNamespace(remote=lambda: created.append(o) or "handle"))
    monkeypatch.setattr(rollout_server, "_EarlyActor", fake_actor)
    monkeypatch.setattr(rollout_server, "install", lambda: None)
    assert rollout_server.prestart(ONE, N1) == ["vllm_server_0_0"]
    (options,) = created
    assert options_mismatch(
        rollout_server._early["vllm_server_0_0"][0], asked_options(_verl_options())
    ) is None
    assert asked_options(options) == asked_options(_verl_options())



def test_a_server_that_cannot_be_created_takes_the_others_back_out(rollout_server: Any, monkeypatch: Any) -> None:
    handles = iter(["first handle"])

    def remote() -> str:
        try:
            return next(handles)
        except StopIteration:
            raise RuntimeError("no CPU on the node for the second server") from None

    early_actor = SimpleNamespace(options=lambda **o: SimpleNamespace(remote=remote))
    monkeypatch.setattr(rollout_server, "_EarlyActor", early_actor)
    two = EarlyServers(names=("vllm_server_0_0", "vllm_server_1_0"), gpus_per_node=2, max_concurrency=1000)
    with pytest.raises(RuntimeError, match="second server"):
        rollout_server.prestart(two, N1)
    # the first would otherwise hold verl's name for good: removed, and the replica patch is in for any left
    assert rollout_server.killed == ["first handle"] and rollout_server._early == {}
    assert rollout_server.vLLMReplica.__init__ is rollout_server._replica_init


def test_a_name_ray_never_releases_is_an_error_that_says_so(rollout_server: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(rollout_server, "NAME_RELEASE_TIMEOUT_S", 0.3)
    rollout_server.held_for_good.add("vllm_server_0_0")
    with pytest.raises(RuntimeError, match=r"still held its name.*GRPO_EARLY_ROLLOUT_SERVERS=0"):
        rollout_server.release("vllm_server_0_0", _Handle())
    _started_early(rollout_server, _Handle())
    rollout_server.discard_unused()  # after verl's servers are up nobody needs the name: a warning, no error
    assert rollout_server._early == {}


def test_a_rollout_config_that_does_not_resolve_yet_gets_verls_servers(verl_defaults: DictConfig) -> None:
    cfg = _v1(verl_defaults)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.max_num_seqs = "${not.a.key}"
    plan = preload_plan(cfg)
    assert plan.early_servers is None and "not resolvable before the run" in plan.early_servers_skipped
