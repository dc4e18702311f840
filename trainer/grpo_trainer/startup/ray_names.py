"""Ray's named actors, for the early starts that hand a name over to verl's or TransferQueue's own actor
(grpo_trainer.startup.rollout_server, grpo_trainer.startup.transfer_queue_start): whether a name is held, and
waiting until Ray frees it after a kill, which it does shortly after, not at once."""

from __future__ import annotations

import time


def name_held(name: str, namespace: str | None = None) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


def wait_until_free(name: str, deadline: float, namespace: str | None = None) -> bool:
    """True once `name` is free; False if it is still held at `deadline` (time.monotonic())."""
    while name_held(name, namespace):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True
