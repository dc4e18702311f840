"""`grpo_trainer_guardrail_*` gauges: each detector's state, labelled by detector name."""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from grpo_trainer.guardrails.sample import DetectorState, Status


class GuardrailGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, text: str) -> Gauge:
            return Gauge(f"grpo_trainer_guardrail_{name}", text, ["detector"], registry=registry)

        self.tripped = gauge("tripped", "1 once the detector tripped in this attempt (latched), else 0.")
        self.warming = gauge("warming", "1 while the detector is still collecting its warm-up baseline.")
        self.value = gauge("value", "The value the detector judged at the last step (NaN when not reported).")
        self.baseline = gauge("baseline", "What that value is compared with: the job's own median (NaN until known).")
        self.onset_step = gauge("onset_step", "First out-of-bounds step of the window that tripped it "
                                 "(policy_collapse: where the entropy fell; NaN if not tripped).")

    def observe(self, states: Iterable[DetectorState]) -> None:
        for s in states:
            self.tripped.labels(s.name).set(1.0 if s.status is Status.TRIPPED else 0.0)
            self.warming.labels(s.name).set(1.0 if s.status is Status.WARMING else 0.0)
            # NaN, not 0, for what is not known: a 0 baseline or onset would read as a measurement
            self.value.labels(s.name).set(math.nan if s.value is None else s.value)
            self.baseline.labels(s.name).set(math.nan if s.baseline is None else s.baseline)
            self.onset_step.labels(s.name).set(math.nan if s.onset_step is None else s.onset_step)
