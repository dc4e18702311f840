"""k-of-m persistence plus latching: what turns "this step is out of bounds" into a detector's state."""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_trainer.guardrails.sample import DetectorState, Status
from grpo_trainer.guardrails.stats import Persistence


@dataclass
class Latch:
    """Trips when k of the last m evaluated steps were out of bounds, then stays tripped for the attempt:
    a pathology that later looks calm (a KL that stops rising) has still happened, and the onset step the
    operator rolls back to must not move."""

    name: str
    k: int
    m: int
    persistence: Persistence = field(init=False)
    onset: int | None = None
    tripped_step: int | None = None
    trip_reason: str = ""

    def __post_init__(self) -> None:
        self.persistence = Persistence(self.k, self.m)

    def judge(
        self,
        step: int,
        out: bool,
        why: str,
        value: float | None,
        baseline: float | None,
        extra: dict[str, float] | None = None,
        earliest_onset: int | None = None,
    ) -> DetectorState:
        """`why` states the rule at this step, e.g. "kl_loss 1.0 > 10 x trailing median 0.02". A detector
        that knows the trouble began before its k-of-m window gives that step as `earliest_onset`."""
        onset = self.persistence.push(step, out)
        if self.tripped_step is None and onset is not None:
            if earliest_onset is not None:
                onset = min(onset, earliest_onset)
            self.onset, self.tripped_step = onset, step
            self.trip_reason = f"{why}; {self.persistence.count()} of the last {self.m} steps out of bounds"
        if self.tripped_step is not None:
            status, reason = Status.TRIPPED, self.trip_reason
        else:
            status = Status.OK
            reason = f"{self.persistence.count()} of the last {self.m} steps out of bounds (trips at {self.k})"
            if out:
                reason = f"{why}; {reason}"
        return DetectorState(
            self.name, status, step, reason, value, baseline, self.onset, self.tripped_step, dict(extra or {})
        )

    def warming(
        self, step: int, reason: str, value: float | None = None, baseline: float | None = None
    ) -> DetectorState:
        return DetectorState(self.name, Status.WARMING, step, reason, value, baseline)

    def idle(self, step: int, reason: str, warm: bool) -> DetectorState:
        """A step this detector could not evaluate (its metric absent): nothing is pushed, a trip stays."""
        if self.tripped_step is not None:
            return DetectorState(
                self.name, Status.TRIPPED, step, self.trip_reason, None, None, self.onset, self.tripped_step
            )
        return DetectorState(self.name, Status.OK if warm else Status.WARMING, step, reason)
