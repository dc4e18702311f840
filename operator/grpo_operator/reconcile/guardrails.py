"""What the operator does about the trainer's guardrails, decided from the GRPOJob alone (pure).

The trainer publishes each detector's state in `status.progress.guardrails`, and in act mode an `action`
it holds for (no step taken, no checkpoint saved) with the checkpoint from before the trouble
(docs/guardrails.md). The operator keeps its own record in `status.guardrails`: every trip it has seen,
every rollback it started, whether it suspended the job. A trip is handled once: its (attempt, detector)
is in the record afterwards, so the status patches that follow, and a restarted operator, do nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from grpo_operator.api import GuardrailsSpec
from grpo_operator.reconcile.status import ConditionUpdate
from grpo_operator.render.guardrails import Rollback, Settings, changed_settings

CONDITION = "GuardrailTripped"


class Outcome(enum.StrEnum):
    OBSERVED = "Observed"
    ROLLED_BACK = "RolledBack"
    SUSPENDED = "Suspended"


@dataclass(frozen=True)
class Trip:
    """A tripped detector as the trainer reported it."""

    attempt: int
    detector: str
    step: int | None
    onset_step: int | None
    value: float | None
    baseline: float | None
    mode: str
    reason: str
    checkpoint_step: int | None = None  # act: the newest checkpoint before the onset, as the trainer found it

    def record(self, outcome: Outcome) -> dict[str, Any]:
        """Its entry in status.guardrails.trips."""
        entry = {
            "attempt": self.attempt, "detector": self.detector, "step": self.step, "onsetStep": self.onset_step,
            "value": self.value, "baseline": self.baseline, "mode": self.mode, "outcome": outcome.value,
            "reason": self.reason, "checkpointStep": self.checkpoint_step,
        }
        return {k: v for k, v in entry.items() if v is not None}

    def describe(self) -> str:
        numbers = ", ".join(f"{k} {v:.6g}" for k, v in (("value", self.value), ("baseline", self.baseline))
                            if v is not None)
        onset = f", onset step {self.onset_step}" if self.onset_step is not None else ""
        return (f"guardrail {self.detector} tripped at step {self.step}{onset} (attempt {self.attempt}, mode "
                f"{self.mode}){': ' + numbers if numbers else ''}; {self.reason}")


class Act(enum.Enum):
    NONE = "none"
    ROLLBACK = "rollback"
    SUSPEND = "suspend"


@dataclass(frozen=True)
class Decision:
    """What to record, and what to do: nothing, a rollback (a new attempt), or suspending the job."""

    trips: tuple[tuple[Trip, Outcome], ...] = ()
    act: Act = Act.NONE
    rollback: Rollback | None = None
    change: str = ""
    why: str = ""  # for a suspension: why no rollback

    @property
    def empty(self) -> bool:
        return not self.trips and self.act is Act.NONE


@dataclass(frozen=True)
class Record:
    """status.guardrails as the operator wrote it."""

    attempt: int = 1
    trips: tuple[dict[str, Any], ...] = ()
    rollbacks: tuple[dict[str, Any], ...] = ()
    suspended: bool = False
    handled: frozenset[tuple[int, str]] = field(default=frozenset())

    @classmethod
    def of(cls, status: dict[str, Any]) -> Record:
        raw = status.get("guardrails") or {}
        trips = tuple(t for t in raw.get("trips") or [] if isinstance(t, dict))
        return cls(
            attempt=int(raw.get("attempt") or 1),
            trips=trips,
            rollbacks=tuple(r for r in raw.get("rollbacks") or [] if isinstance(r, dict)),
            suspended=bool(raw.get("suspended")),
            handled=frozenset((int(t.get("attempt") or 1), str(t.get("detector"))) for t in trips),
        )

    @property
    def pending(self) -> dict[str, Any] | None:
        """The rollback decided whose attempt has not been created yet."""
        last = self.rollbacks[-1] if self.rollbacks else None
        return last if last is not None and not last.get("started") else None

    @property
    def rollbacks_done(self) -> int:
        """Rollbacks a trip caused (a resume after a suspension is not one)."""
        return sum(1 for r in self.rollbacks if not r.get("resumed"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def reported_trips(section: dict[str, Any], attempt: int) -> list[Trip]:
    """The tripped detectors of the trainer's section (status.progress.guardrails) of this attempt."""
    action = section.get("action") if isinstance(section.get("action"), dict) else {}
    trips = []
    for entry in section.get("detectors") or []:
        if not isinstance(entry, dict) or entry.get("status") != "tripped":
            continue
        name = str(entry.get("name"))
        acted = action.get("detector") == name
        trips.append(Trip(
            attempt=attempt,
            detector=name,
            step=_int(entry.get("trippedStep")) or _int(entry.get("step")),
            onset_step=_int(entry.get("onsetStep")),
            value=_number(entry.get("value")),
            baseline=_number(entry.get("baseline")),
            mode=str(entry.get("mode") or section.get("mode") or "observe"),
            reason=str(entry.get("reason") or ""),
            checkpoint_step=_int(action.get("rollbackStep")) if acted else None,
        ))
    return trips


def detector_mode(spec: GuardrailsSpec, detector: str) -> str:
    settings = getattr(spec.detectors, detector, None)
    return (getattr(settings, "mode", None) or spec.mode) if settings is not None else spec.mode


def decide(spec: GuardrailsSpec, base: Settings, status: dict[str, Any]) -> Decision:
    """What the trainer's latest report asks of the operator, given what it did already."""
    record = Record.of(status)
    section = (status.get("progress") or {}).get("guardrails")
    if not isinstance(section, dict) or record.suspended or record.pending is not None:
        return Decision()
    # A section of an earlier attempt (the new one has not reported yet) was handled when it came.
    if int(section.get("attempt") or 1) != record.attempt:
        return Decision()
    fresh = [t for t in reported_trips(section, record.attempt) if (t.attempt, t.detector) not in record.handled]
    if not fresh:
        return Decision()
    action = section.get("action") if isinstance(section.get("action"), dict) else None
    acting = next((t for t in fresh if action is not None and action.get("state") == "holding"
                   and int(action.get("attempt") or 1) == record.attempt and action.get("detector") == t.detector
                   and detector_mode(spec, t.detector) == "act"), None)
    observed = tuple((t, Outcome.OBSERVED) for t in fresh if t is not acting)
    if acting is None:
        return Decision(trips=observed)
    if record.rollbacks_done >= spec.rollback.max_rollbacks:
        why = (f"guardrails.rollback.maxRollbacks is {spec.rollback.max_rollbacks}"
               if spec.rollback.max_rollbacks == 0 else
               f"the problem came back after {record.rollbacks_done} rollback(s) (maxRollbacks "
               f"{spec.rollback.max_rollbacks})")
        return Decision(trips=(*observed, (acting, Outcome.SUSPENDED)), act=Act.SUSPEND, why=why)
    settings, change = changed_settings(spec, base, record.rollbacks_done + 1)
    # only the setting the rollbacks change travels: the other stays as the job's config has it
    by_kl = spec.rollback.change == "klCoef" and base.kl_loss_coef is not None
    rollback = Rollback(
        attempt=record.attempt + 1,
        step=acting.checkpoint_step or 0,
        detector=acting.detector,
        learning_rate=None if by_kl else settings.learning_rate,
        kl_loss_coef=settings.kl_loss_coef if by_kl else None,
    )
    return Decision(trips=(*observed, (acting, Outcome.ROLLED_BACK)), act=Act.ROLLBACK, rollback=rollback,
                    change=change)


def rollback_entry(rollback: Rollback, change: str, at: str, resumed: bool = False) -> dict[str, Any]:
    """Its entry in status.guardrails.rollbacks, not started yet."""
    entry: dict[str, Any] = {
        "attempt": rollback.attempt, "detector": rollback.detector, "fromStep": rollback.step, "change": change,
        "learningRate": rollback.learning_rate, "klLossCoef": rollback.kl_loss_coef, "requestedAt": at,
        "started": False,
    }
    if resumed:
        entry["resumed"] = True
    return {k: v for k, v in entry.items() if v is not None}


def rollback_of(entry: dict[str, Any]) -> Rollback:
    """The Rollback a status.guardrails.rollbacks entry describes (to render its attempt)."""
    return Rollback(
        attempt=int(entry["attempt"]),
        step=int(entry.get("fromStep") or 0),
        detector=str(entry.get("detector") or ""),
        learning_rate=_number(entry.get("learningRate")),
        kl_loss_coef=_number(entry.get("klLossCoef")),
        requested_at=str(entry["requestedAt"]) if entry.get("requestedAt") else None,
    )


def resume_after_suspension(record: Record, at: str) -> dict[str, Any] | None:
    """The attempt a user's un-suspend starts: from the suspending trip's checkpoint, with the settings the
    rollbacks so far made (no further change). None when the guardrails did not suspend the job."""
    if not record.suspended:
        return None
    last_trip = record.trips[-1] if record.trips else {}
    last_rollback = record.rollbacks[-1] if record.rollbacks else {}
    rollback = Rollback(
        attempt=record.attempt + 1,
        step=int(last_trip.get("checkpointStep") or 0),
        detector=str(last_trip.get("detector") or ""),
        learning_rate=_number(last_rollback.get("learningRate")),
        kl_loss_coef=_number(last_rollback.get("klLossCoef")),
    )
    return rollback_entry(rollback, "none (resumed after a suspension)", at, resumed=True)


def condition(decision: Decision, spec: GuardrailsSpec, record: Record) -> ConditionUpdate | None:
    """The GuardrailTripped condition after this decision (None when it records nothing)."""
    if decision.empty:
        return None
    trip, outcome = decision.trips[-1]
    text = trip.describe()
    if decision.act is Act.ROLLBACK and decision.rollback is not None:
        where = (f"checkpoint step {decision.rollback.step}" if decision.rollback.step
                 else "the start (no checkpoint was saved before the onset)")
        text += (f". Rolled back: attempt {decision.rollback.attempt} resumes from {where} with {decision.change} "
                 f"(rollback {record.rollbacks_done + 1} of at most {spec.rollback.max_rollbacks})")
    elif decision.act is Act.SUSPEND:
        text += (f". Suspended: {decision.why}; the checkpoints are kept. Look at the run (status.progress, "
                 "the driver's log), then set spec.scheduling.suspend=false to resume from checkpoint step "
                 f"{trip.checkpoint_step or 0} with the changes made so far, or delete the job")
    else:
        text += ". Observed only (this detector's mode is observe): nothing was changed"
    return ConditionUpdate(CONDITION, "True", outcome.value if decision.act is not Act.NONE else "Observed", text)
