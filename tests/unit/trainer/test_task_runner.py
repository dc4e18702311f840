"""The TaskRunner grpo-train starts before it prepares the data (grpo_trainer.startup.task_runner)."""

from __future__ import annotations

import pytest
from grpo_trainer.startup.task_runner import EarlyTaskRunner, Preload, preload_plan
from omegaconf import DictConfig, OmegaConf, open_dict


def test_the_v1_trainer_is_prepared_as_verl_run_would(verl_defaults: DictConfig) -> None:
    cfg = verl_defaults.copy()
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.name = "vllm"
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 3
    plan = preload_plan(cfg)
    assert plan.modules == ("transfer_queue", "verl.trainer.ppo.v1")
    assert plan.trainer_mode == OmegaConf.select(cfg, "trainer.v1.trainer_mode")
    assert plan.rollout_engine == "vllm"
    # the job's own TransferQueue settings, enabled as TaskRunnerV1.run enables them before init
    assert plan.transfer_queue is not None and plan.transfer_queue["enable"] is True
    assert plan.transfer_queue["backend"]["SimpleStorage"]["num_data_storage_units"] == 3
    assert cfg.transfer_queue.enable is False  # the config itself is not changed


def test_the_legacy_trainer_gets_nothing_prepared(verl_defaults: DictConfig) -> None:
    cfg = verl_defaults.copy()
    cfg.trainer.use_v1 = False
    assert preload_plan(cfg) == Preload(modules=(), trainer_mode=None, rollout_engine=None, transfer_queue=None)


def test_options_run_ppo_adds_are_merged_over_ours() -> None:
    runner = EarlyTaskRunner(actor_class=object(), default_options={"num_cpus": 1, "resources": {"x": 0.001}})
    bound = runner.options(runtime_env={"nsight": {}})
    assert bound.options == {"num_cpus": 1, "resources": {"x": 0.001}, "runtime_env": {"nsight": {}}}


@pytest.mark.slow
def test_preload_starts_transfer_queue_and_verl_run_then_only_connects(
    verl_defaults: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a real Ray worker: the preload's TransferQueue is the one verl's run() finds."""
    import ray

    @ray.remote(num_cpus=0)
    def preload_then_init_again(plan: Preload) -> tuple[list[str], bool]:
        import transfer_queue as tq
        from grpo_trainer.startup.task_runner import join_transfer_queue, run_preload

        took = {**run_preload(plan), **join_transfer_queue(plan)}
        controller = tq.interface._TQ_CONTROLLER
        tq.init(OmegaConf.create(plan.transfer_queue))  # what TaskRunnerV1.run does next
        same = controller == tq.interface._TQ_CONTROLLER
        tq.close()
        return sorted(took), same

    cfg = verl_defaults.copy()
    plan = preload_plan(cfg)
    plan = Preload(plan.modules, plan.trainer_mode, None, plan.transfer_queue)  # no vLLM on a CPU machine
    # TransferQueue holds one CPU per actor for its life: the controller and 8 storage units by default
    monkeypatch.setenv("RAY_ADDRESS", "local")  # never a cluster another test started with `ray start`
    ray.init(num_cpus=16, include_dashboard=False)
    try:
        parts, same = ray.get(preload_then_init_again.remote(plan), timeout=300)
    finally:
        ray.shutdown()
    assert parts == ["imports", "transfer queue"]
    assert same
