"""The one error type the exporter raises on purpose.

Every refusal names the problem and the fix, and carries a machine-readable reason so the
operator can put it into a GRPOJob condition without parsing prose.
"""

from __future__ import annotations


class ExportError(Exception):
    """A refusal or failure the user can act on (exit code 2, or 3 for verification)."""

    exit_code = 2

    def __init__(self, reason: str, problem: str, fix: str) -> None:
        super().__init__(f"{problem} Fix: {fix}")
        self.reason = reason
        self.problem = problem
        self.fix = fix


class VerificationError(ExportError):
    """The written model does not match the checkpoint: never published."""

    exit_code = 3
