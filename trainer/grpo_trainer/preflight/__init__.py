"""The preflight: everything that can be known about a GRPOJob before it takes a GPU.

One implementation, two callers:

- `grpo-train --preflight` in the operator's CPU-only preflight Job, before the RayJob exists
  (`preflight_config_file`: from the rendered verl.yaml); its verdict goes to the container's
  termination message, where the operator reads it into the GRPOJob's `Preflight` condition;
- the rehearsal mode inside a live Ray cluster reuses the same checks (`run_preflight` on the config
  grpo-train has built) and adds what only the cluster can show.

Each check is a small function returning `Check`s (verdict.py) that name the GRPOJob field to change,
the value found and the fix. fit.py is the pure per-GPU memory estimate the memory check applies.
"""

from grpo_trainer.preflight.run import PreflightOptions, preflight_config_file, run_preflight
from grpo_trainer.preflight.verdict import Check, Verdict, write_termination_message

__all__ = [
    "Check",
    "PreflightOptions",
    "Verdict",
    "preflight_config_file",
    "run_preflight",
    "write_termination_message",
]
