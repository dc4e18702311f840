"""What an act-mode trip asks of the operator, and the trainer's hold while it waits for the answer.

The trainer cannot roll itself back: the operator deletes the RayJob and starts a new attempt from the
checkpoint before the onset. Until it does, the trainer must take no step and save no checkpoint (a new
checkpoint would be past the trouble, and `checkpoints.keep` pruning could remove the one to go back to),
so it holds, and gives up with an error after `holdSeconds` rather than idling the GPUs for ever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from grpo_trainer.guardrails.sample import DetectorState
from grpo_trainer.guardrails.status import numbers

HOLDING = "holding"


class GuardrailHoldExpired(RuntimeError):
    """The operator did not act on an act-mode trip in time; the attempt must end here, not train on."""


@dataclass(frozen=True)
class Action:
    """One act-mode trip as published in status.progress.guardrails.action."""

    detector: str
    onset_step: int
    tripped_step: int
    rollback_step: int | None  # newest checkpoint saved before the onset; None: start again from step 0
    attempt: int
    since: datetime
    hold_seconds: int
    reason: str
    value: float | None = None
    baseline: float | None = None
    state: str = HOLDING

    @classmethod
    def of(
        cls, s: DetectorState, rollback_step: int | None, attempt: int, since: datetime, hold_seconds: int
    ) -> Action:
        onset = s.onset_step if s.onset_step is not None else s.step
        tripped = s.tripped_step if s.tripped_step is not None else s.step
        return cls(s.name, onset, tripped, rollback_step, attempt, since, hold_seconds, s.reason, s.value, s.baseline)

    def entry(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "onsetStep": self.onset_step,
            "trippedStep": self.tripped_step,
            "rollbackStep": self.rollback_step,
            "attempt": self.attempt,
            "state": self.state,
            "since": self.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "holdSeconds": self.hold_seconds,
            "values": numbers({"value": self.value, "baseline": self.baseline}),
            "reason": self.reason,
        }

    def expired_message(self) -> str:
        return (
            f"guardrail {self.detector} tripped at step {self.tripped_step} (onset step {self.onset_step}) in act "
            f"mode and the operator did not act within holdSeconds ({self.hold_seconds} s): the trainer held so "
            f"that it could roll back to checkpoint step {self.rollback_step if self.rollback_step is not None else 0}"
            f". Check that the grpo-operator is running and what its log says about this job; to let training go "
            f"on past such a trip, set spec.guardrails.mode (or this detector's mode) to observe."
        )


@dataclass(frozen=True)
class Clock:
    """Time as the hold sees it; tests pass a fake one so that a 900 s hold takes no time."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


def hold(
    action: Action, clock: Clock, interval: float = 5.0, tick: Callable[[], None] | None = None
) -> None:
    """Block for action.hold_seconds, in sleeps of at most `interval` (calling `tick` after each, e.g. to
    send a status patch that failed again); the operator ends the process before that when it acts.
    Raises GuardrailHoldExpired when the time is up."""
    deadline = clock.monotonic() + action.hold_seconds
    while (left := deadline - clock.monotonic()) > 0:
        clock.sleep(min(interval, left))
        if tick is not None:
            tick()
    raise GuardrailHoldExpired(action.expired_message())
