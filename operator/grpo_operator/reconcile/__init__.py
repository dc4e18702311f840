"""Reconciliation: what the operator does with each GRPOJob and its children.

- `handlers`: every GRPOJob event (create the children, forward an edit, resync after a restart), and
  the preflight Job's events;
- `gate`: the preflight before the RayJob (its Job, its verdict into the status, the RayJob after a pass);
- `mirror`: child (RayJob, converter Job) events into the GRPOJob's status; starts the converter;
- `startup`: kopf's start-up, login and clean-up;
- `binding`: while a job is Pending, its claims' binding checked on a timer;
- pure decisions beside them: `lifecycle` (what an event needs), `status` (children -> phase and
  conditions), `preflight` (a preflight Job -> its verdict and conditions), `capacity` (can a role's
  pool hold it; its GPUs' memory), `children` (which objects a job gets, what it depends on), `storage`
  (why a claim does not bind), `retries` (timers, locks).

Importing this package registers every kopf handler.
"""

from grpo_operator.reconcile import handlers, mirror, startup

__all__ = ["handlers", "mirror", "startup"]
