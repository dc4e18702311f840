"""Role placement with a reward model, on GPU processes: the `placement` run of the gpu batch.

A 3-node Ray cluster on the one GPU host (head; actor node and reward node, each declaring the GPU and its
role's resource), grpo-train with a tiny reward model in verl's reward-model pool. Ray's state API must
show every actor-role and reward-role actor and bundle on its role's node, the reward model's vLLM server
must have held GPU memory, and all 10 steps must complete. bench/gpu/placement_run.py says what this does
and does not prove about the 8-GPU layout.
"""

from __future__ import annotations

from gpu_runs import gpu_marks, outcome_of

pytestmark = gpu_marks()


def test_every_role_ran_on_its_node_and_the_reward_model_on_the_gpu(gpu_batch) -> None:
    o = outcome_of(gpu_batch, "placement")
    run = o.result
    assert run.rc == 0 and len(run.steps) == int(run.spec["steps"]), f"rc {run.rc}, {len(run.steps)} steps"
    assert o.placement is not None, "Ray's state API was not read"
    print(o.placement)
    assert o.placement["passed"], o.placement["violations"]
    assert o.placement["reward_model_gpu_mib"], "no GPU process samples: nvidia-smi gave nothing"
    # the scores came from the model: random weights give different scores to different answers
    assert any((s.get("critic/score/max") or 0) > (s.get("critic/score/min") or 0) for s in run.steps)
