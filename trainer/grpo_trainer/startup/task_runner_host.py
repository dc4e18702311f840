"""The TaskRunner actor's class as the driver creates it: a module without verl.

grpo-train creates the TaskRunner before its driver imports verl (grpo_trainer.startup.ray_start), so the class it
hands Ray cannot be the TaskRunnerV1 subclass of grpo_trainer.startup.task_runner_actor: importing that module
imports verl (torch, transformers). This class builds that runner in the actor's process, where the
import has to happen anyway, and hands it `run`, the one method verl's run_ppo calls on the actor.
"""

from __future__ import annotations

from typing import Any

import ray

from grpo_trainer.startup.task_runner import Preload


class GrpoTaskRunner:
    def __init__(self, plan: Preload | None = None) -> None:
        from grpo_trainer.startup.task_runner_actor import GrpoTaskRunnerV1

        self.runner = GrpoTaskRunnerV1(plan)

    def run(self, config: Any) -> Any:
        return self.runner.run(config)


GrpoTaskRunnerActor = ray.remote(GrpoTaskRunner)
