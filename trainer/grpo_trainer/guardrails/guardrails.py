"""All detectors of one job, built from its configuration, fed one step at a time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from grpo_trainer.guardrails.action import Action
from grpo_trainer.guardrails.collapse import DegenerateBatch, PolicyCollapse
from grpo_trainer.guardrails.config import GuardrailsConfig, detector_mode
from grpo_trainer.guardrails.non_finite import NonFinite
from grpo_trainer.guardrails.sample import DetectorState, StepSample
from grpo_trainer.guardrails.status import guardrails_section
from grpo_trainer.guardrails.trailing import grad_spike, kl_runaway
from grpo_trainer.progress.step_metrics import StepMetrics

log = logging.getLogger(__name__)


class Detector(Protocol):
    name: str

    def observe(self, s: StepSample) -> DetectorState: ...

    def baselines(self) -> dict[str, float]: ...

    def restore(self, baselines: dict[str, Any]) -> None: ...


# detector name (as in the configuration) -> factory taking warmup= and that detector's settings
FACTORIES: dict[str, Callable[..., Detector]] = {
    "non_finite": lambda warmup: NonFinite(),  # not statistical: no warm-up
    "kl_runaway": kl_runaway,
    "grad_spike": grad_spike,
    "policy_collapse": PolicyCollapse,
    "degenerate_batch": DegenerateBatch,
}


def build_detectors(config: GuardrailsConfig) -> list[Detector]:
    """The enabled detectors, in a fixed order, with the configured thresholds."""
    detectors = []
    for name, make in FACTORIES.items():
        settings = getattr(config.detectors, name)
        if settings.enabled:
            detectors.append(make(warmup=config.warmup_steps, **settings.model_dump(exclude={"enabled", "mode"})))
    return detectors


class Guardrails:
    """`observe(step metrics)` -> each detector's state. A detector that raises is logged and skipped for
    that step (its previous state stands): a bug in a guardrail must never cost a training step."""

    def __init__(
        self, config: GuardrailsConfig | None = None, detectors: list[Detector] | None = None, attempt: int = 1
    ) -> None:
        self.config = config or GuardrailsConfig()
        self.detectors = build_detectors(self.config) if detectors is None else detectors
        self.attempt = attempt
        self.states: dict[str, DetectorState] = {}
        # The one action of this attempt (its first act-mode trip): the trainer holds for it, and the
        # attempt ends there, so a later trip never replaces it.
        self.action: Action | None = None

    @property
    def mode(self) -> str:
        return self.config.mode

    def observe(self, m: StepMetrics | StepSample) -> list[DetectorState]:
        sample = m if isinstance(m, StepSample) else StepSample.of(m)
        for detector in self.detectors:
            try:
                self.states[detector.name] = detector.observe(sample)
            except Exception:
                log.exception("guardrail %s failed at step %s; skipped", detector.name, sample.step)
        return [self.states[d.name] for d in self.detectors if d.name in self.states]

    def section(self) -> dict[str, Any]:
        """status.progress.guardrails after the last step."""
        states = [self.states[d.name] for d in self.detectors if d.name in self.states]
        modes = {s.name: self.detector_mode(s.name) for s in states}
        action = self.action.entry() if self.action is not None else None
        return guardrails_section(self.mode, states, self.baselines(), self.attempt, modes, action)

    def detector_mode(self, name: str) -> str:
        """A configured detector's effective mode; a detector the configuration does not know (a test's,
        a future one's) follows the job's mode."""
        return detector_mode(self.config, name) if name in type(self.config.detectors).model_fields else self.mode

    def acting_trip(self) -> DetectorState | None:
        """The act-mode trip the trainer must hold for: none once this attempt has its action. Of several
        at once the earliest onset, so the rollback goes back before all of them."""
        if self.action is not None:
            return None
        acting = [s for s in self.tripped() if self.detector_mode(s.name) == "act"]
        return min(acting, key=lambda s: s.onset_step if s.onset_step is not None else s.step, default=None)

    def tripped(self) -> list[DetectorState]:
        return [s for s in self.states.values() if s.tripped]

    def baselines(self) -> dict[str, dict[str, float]]:
        """What a resumed attempt needs to skip its warm-up: {detector: {name: value}} (known ones only)."""
        out = {}
        for d in self.detectors:
            try:
                if b := d.baselines():
                    out[d.name] = b
            except Exception:
                log.exception("guardrail %s: could not read its baselines", d.name)
        return out

    def restore(self, baselines: Mapping[str, Any]) -> None:
        """Baselines an earlier attempt published (status.progress.guardrails.baselines); bad entries are
        ignored, and the detector then warms up again."""
        for d in self.detectors:
            entry = baselines.get(d.name)
            if isinstance(entry, Mapping):
                try:
                    d.restore(dict(entry))
                except Exception:
                    log.exception("guardrail %s: could not restore %r", d.name, entry)
