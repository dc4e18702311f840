"""The newest version of each GRPOJob this process has seen: from the watch, and from its own writes.

Status mirroring, the storage check, the preflight gate and the guardrails each read the GRPOJob before they
act, to see the status the operator wrote last (an event's body may predate it). That was a GET per RayJob event
and per timer: more than half of the API requests a job cost (bench/operator/RESULTS.md, issue 34). Every version
the operator can need has passed through this process already: the watch delivers each change (the trainer's
progress, a user's edit), and each status or spec write answers with the object as written. So the newest of
them is what a GET would return, save for a change whose event has not arrived yet, which is no different from a
GET that ran a moment earlier: that event comes next and is acted on then.

Newest by `metadata.resourceVersion`: for one object it is the etcd revision of its last write, so a larger one is
a later write (an event queued behind our own write's answer must not replace it). Kept as compact JSON without
`managedFields`: a thousand jobs cost a few MB, not the tens a thousand parsed bodies would.
"""

from __future__ import annotations

import json
from typing import Any

Key = tuple[str, str]


def revision_of(job: dict[str, Any]) -> int | None:
    """The object's resourceVersion as a number (None: none, or not a number)."""
    try:
        return int((job.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


class JobCache:
    def __init__(self) -> None:
        self._jobs: dict[Key, tuple[int | None, str, str]] = {}  # key -> (revision, uid, JSON)

    def remember(self, job: dict[str, Any]) -> None:
        """Keep `job` unless that version or a later one (resourceVersion) is kept already: the watch event of each
        of our own writes brings back the version its answer gave us, and is not serialized a second time."""
        meta = job.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        revision, uid = revision_of(job), meta.get("uid", "")
        kept = self._jobs.get(key)
        if kept is not None and kept[1] == uid and kept[0] is not None and revision is not None and kept[0] >= revision:
            return
        slim = {**job, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        self._jobs[key] = (revision, uid, json.dumps(slim, separators=(",", ":")))

    def revision(self, namespace: str, name: str) -> int | None:
        """The resourceVersion of the version kept (None: none kept, or one without a number)."""
        kept = self._jobs.get((namespace, name))
        return None if kept is None else kept[0]

    def forget(self, namespace: str, name: str) -> None:
        self._jobs.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A fresh copy (callers may change it), or None when this process has seen no version."""
        kept = self._jobs.get((namespace, name))
        return None if kept is None else json.loads(kept[2])

    def __len__(self) -> int:
        return len(self._jobs)
