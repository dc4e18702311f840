"""What a GRPOJob event asks of the operator, decided from the object alone.

The operator keeps no bookkeeping on the object beyond its status: `status.phase` says whether the
children exist, `status.observedGeneration` which spec generation was acted on, and
`status.specDigests` what each spec field was then, so an edit can be told apart field by field.
(kopf's own create/update handlers would keep two annotations for this and patch the object twice
per job, each patch one more event for every watcher: bench/operator/RESULTS.md, third round.)
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from typing import Any

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Spec fields forwarded to the running job rather than refused or ignored: suspend reaches the RayJob;
# the alert thresholds reach the operator's metrics on every event (metrics.record_spec).
FORWARDED_FIELDS = frozenset({"spec.scheduling.suspend", "spec.monitoring"})


class Action(enum.Enum):
    CREATE = "create"  # validate, check dependencies and capacity, create the preflight (or the children)
    APPLY_EDIT = "apply-edit"  # the spec changed since it was acted on: forward or report the edit
    RESYNC = "resync"  # seen afresh (operator start, re-list): bring the status up to date
    NONE = "none"


def next_action(job: Mapping[str, Any], listing: bool) -> Action:
    """`listing`: the event comes from a (re-)listing, not a change; the operator may have missed changes."""
    status = job.get("status") or {}
    phase = status.get("phase")
    if phase in TERMINAL_PHASES:
        return Action.NONE
    if phase is None:
        return Action.CREATE
    edited = job.get("metadata", {}).get("generation") != status.get("observedGeneration")
    if phase in ("Invalid", "Preflight"):
        # Nothing trains yet: an edit is rendered afresh (and checked by a new preflight); after a restart
        # the retry timer is gone, and a preflight Job may have finished unwatched.
        return Action.CREATE if edited or listing else Action.NONE
    if edited:
        return Action.APPLY_EDIT
    return Action.RESYNC if listing else Action.NONE


def spec_digests(spec: Mapping[str, Any]) -> dict[str, str]:
    """A short digest of each top-level spec field; `scheduling` by subfield (suspend is forwarded)."""
    fields: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "scheduling" and isinstance(value, Mapping):
            fields.update({f"spec.scheduling.{k}": v for k, v in value.items()})
        else:
            fields[f"spec.{key}"] = value
    return {field: _digest(value) for field, value in sorted(fields.items())}


def edited_fields(before: Mapping[str, str], after: Mapping[str, str],
                  defaults: Mapping[str, str] | None = None) -> list[str]:
    """Fields whose digest differs, including ones added or removed. A field added with its default's digest
    (`defaults`, from spec_digests of the defaults) is no edit: a newer CRD gave a job that started before it
    existed its default (spec.security after the upgrade that brought it)."""
    defaults = defaults or {}
    return sorted(f for f in before.keys() | after.keys() if before.get(f) != after.get(f)
                  and not (f not in before and f in defaults and after.get(f) == defaults[f]))


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
