"""The TaskRunner actor class grpo-train starts: verl's TaskRunnerV1 whose constructor runs a Preload.

A module of its own because it imports verl's main_ppo (torch, transformers) at import: only the
driver's run path and the actor's process load it, never the config builder or --dry-run.
"""

from __future__ import annotations

import ray
from verl.trainer.main_ppo import TaskRunnerV1

from grpo_trainer.task_runner import PREPARED_LINE, Preload, run_preload


class GrpoTaskRunner(TaskRunnerV1.__ray_actor_class__):  # verl's class, without its @ray.remote wrapper
    def __init__(self, plan: Preload | None = None) -> None:
        super().__init__()
        if plan is not None:
            took = run_preload(plan)
            # one line a user (and the GPU bench's start-up breakdown) can read
            print(PREPARED_LINE + ", ".join(f"{part} {seconds:.1f} s" for part, seconds in took.items()), flush=True)


GrpoTaskRunnerActor = ray.remote(GrpoTaskRunner)
