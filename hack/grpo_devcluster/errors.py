"""Errors that name the component at fault, so a user knows where to look."""

from __future__ import annotations


class DevClusterError(RuntimeError):
    """A component of the local control plane could not be built or started."""

    def __init__(self, component: str, reason: str) -> None:
        super().__init__(f"{component}: {reason}")
        self.component = component
        self.reason = reason
