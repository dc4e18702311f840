"""The preflight's answer: one `Check` per thing looked at, and whether they all passed.

It travels as JSON through the container's termination message (Kubernetes keeps at most 4096 bytes
of it), so `to_json` shortens the human text until it fits, keeping every check's name, field and ok;
only when even those do not fit are passed checks summed up in one row and failures beyond what fits
counted. The JSON is always whole.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

TERMINATION_MESSAGE_LIMIT = 4096
_TEXT_FIELDS = ("message", "fix", "value")
# Longest text kept per field, tried in turn until the JSON fits; 0 keeps only the keys.
_TEXT_BUDGETS = (None, 600, 300, 160, 80, 40, 16, 0)
# The sizing's reasons travel in the verdict's head, which is never shortened: bounded here instead.
SIZING_SUMMARY_LIMIT = 700


@dataclass(frozen=True)
class Check:
    """One look at the job: `field` is the GRPOJob spec path to change (e.g. spec.data.maxPromptLength)."""

    name: str
    field: str
    ok: bool
    message: str
    value: str = ""
    fix: str = ""


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...] = field(default_factory=tuple)
    # The size the operator gives the checkpoint claim it creates when spec.checkpoints.volume.size is empty.
    checkpoint_claim_bytes: int | None = None
    # The verl keys the preflight sized for this job's model and GPUs (sizing.py), and why, in one line.
    sized: tuple[tuple[str, Any], ...] = ()
    sizing_summary: str = ""

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def _head(self) -> dict[str, Any]:
        head: dict[str, Any] = {"passed": self.passed}
        if self.checkpoint_claim_bytes is not None:
            head["checkpointClaimBytes"] = self.checkpoint_claim_bytes
        if self.sized:
            head["sizing"] = {"values": dict(self.sized), "summary": _cut(self.sizing_summary, SIZING_SUMMARY_LIMIT)}
        return head

    def to_dict(self) -> dict[str, Any]:
        return {**self._head(), "checks": [asdict(c) for c in self.checks]}

    def to_json(self, limit: int | None = None) -> str:
        """Compact JSON; with `limit` (bytes), failed checks' text is kept longest, passed checks' cut first."""
        full = json.dumps(self.to_dict(), separators=(",", ":"))
        if limit is None or len(full.encode()) <= limit:
            return full
        for passed_budget in _TEXT_BUDGETS:
            for failed_budget in _TEXT_BUDGETS:
                if failed_budget is not None and passed_budget is not None and failed_budget < passed_budget:
                    continue
                text = json.dumps(self._shortened(passed_budget, failed_budget), separators=(",", ":"))
                if len(text.encode()) <= limit:
                    return text
        return self._summarised(limit)

    def _summarised(self, limit: int) -> str:
        """Too many checks for even their names (one per data file, say): passed ones become one line, then
        as many failures as fit are kept and the rest counted, in rows of the same shape."""
        passed = [c for c in self.checks if c.ok]
        failed = list(self.failures)
        for keep in range(len(failed), -1, -1):
            rows = failed[:keep]
            if len(failed) > keep:
                rows.append(Check("more", "", False, f"{len(failed) - keep} more failed checks"))
            if passed:
                rows.append(Check("passed", "", True, f"{len(passed)} checks passed"))
            text = json.dumps(Verdict(tuple(rows), self.checkpoint_claim_bytes, self.sized,
                                      self.sizing_summary)._shortened(80, 80),
                              separators=(",", ":"))
            if len(text.encode()) <= limit:
                return text
        return json.dumps({**self._head(), "checks": []})

    def _shortened(self, passed_budget: int | None, failed_budget: int | None) -> dict[str, Any]:
        checks = []
        for check in self.checks:
            budget = passed_budget if check.ok else failed_budget
            row = asdict(check)
            for key in _TEXT_FIELDS:
                row[key] = _cut(row[key], budget)
            checks.append(row)
        return {**self._head(), "checks": checks}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        sizing = data.get("sizing") or {}
        return cls(
            tuple(
                Check(
                    name=str(c["name"]),
                    field=str(c.get("field", "")),
                    ok=bool(c["ok"]),
                    message=str(c.get("message", "")),
                    value=str(c.get("value", "")),
                    fix=str(c.get("fix", "")),
                )
                for c in data["checks"]
            ),
            int(data["checkpointClaimBytes"]) if data.get("checkpointClaimBytes") is not None else None,
            tuple((sizing.get("values") or {}).items()),
            str(sizing.get("summary", "")),
        )


def _cut(text: str, budget: int | None) -> str:
    if budget is None or len(text) <= budget:
        return text
    return text[: max(budget - 1, 0)] + "…" if budget else ""


def write_termination_message(verdict: Verdict, path: str) -> None:
    """The verdict where the kubelet reads a container's termination message (terminationMessagePath)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(verdict.to_json(TERMINATION_MESSAGE_LIMIT))
