"""No diff-base: kopf's per-event essence is work for handlers this operator does not have.

For every event of every watched resource, kopf builds the object's "essence" (a deep copy of the
whole body, status and managedFields included) and deep-copies it once more to clear progress
marks, then diffs it against the last handled one. Only changing handlers (on.create, on.update,
on.field, on.resume) and daemons/timers use the result, and this operator registers none: GRPOJobs
are handled by a watch-event handler that decides from the object itself (lifecycle.py). The two
deep copies were 20 % of the operator's CPU in a 500-job burst, most of it on KubeRay's large RayJob
bodies (bench/operator/RESULTS.md, third round).

`check_unused` fails at start-up if someone registers such a handler: with this storage every event
would look like a creation to it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import kopf


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def handlers_needing_a_diff_base(registry: kopf.OperatorRegistry) -> Collection[str]:
    """Ids of the registered handlers that a missing diff-base would break (changing handlers, daemons, timers)."""
    changing = registry._changing.get_all_handlers()
    spawning = registry._spawning.get_all_handlers()
    return [h.id for h in (*changing, *spawning)]


def check_unused(registry: kopf.OperatorRegistry) -> None:
    needing = handlers_needing_a_diff_base(registry)
    if needing:
        raise RuntimeError(
            f"handlers {sorted(needing)} need kopf's diff-base, which NoDiffBaseStorage does not keep: "
            "configure kopf's AnnotationsDiffBaseStorage (or turn these into watch-event handlers)"
        )
