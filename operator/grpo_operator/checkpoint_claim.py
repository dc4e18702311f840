"""The access modes of the checkpoint PVC the operator creates, decided from the spec alone. Pure.

One rule for the two places that need it before any claim exists: the planner (which claim to render, whether the
head must follow the actor to its node) and the runtime merge (which of a GRPORuntime's storage classes to give it).
"""

from __future__ import annotations

from grpo_operator.api.job import GRPOJobSpec

READ_WRITE_ONCE = "ReadWriteOnce"
READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def new_claim_access_modes(spec: GRPOJobSpec) -> tuple[str, ...]:
    """checkpoints.volume.accessModes as asked, else ReadWriteOnce for one actor pod and ReadWriteMany for several
    (each writes its shards from its own node)."""
    actor = spec.placement.roles.actor
    default = READ_WRITE_MANY if actor is not None and actor.replicas > 1 else READ_WRITE_ONCE
    return tuple(spec.checkpoints.volume.access_modes or (default,))
