"""`grpo` as a verl tracking backend (trainer.logger: [console, grpo]) without forking verl.

verl 0.9.1's Tracking has a fixed backend list and builds its loggers in __init__; `log()` then calls
every entry of `self.logger`. We add "grpo" to the accepted names and, after verl's own __init__,
add our backend to `self.logger`. Installed in every Ray worker by grpo_trainer.worker_setup.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_trainer.guardrails import Guardrails, GuardrailsConfigError, parse_config
from grpo_trainer.guardrails.action import Action, Clock, hold
from grpo_trainer.guardrails.config import ENV_VAR as GUARDRAILS_ENV
from grpo_trainer.guardrails.config import attempt_from_env
from grpo_trainer.guardrails.sample import DetectorState
from grpo_trainer.guardrails.status import error_section
from grpo_trainer.progress.prometheus import TrainerMetrics
from grpo_trainer.progress.status import StatusReporter
from grpo_trainer.progress.step_file import append_step
from grpo_trainer.progress.step_metrics import StepMetrics, extract
from grpo_trainer.rollback.pins import pin_step, rollback_step

log = logging.getLogger(__name__)

BACKEND_NAME = "grpo"


@dataclass(frozen=True)
class ProgressEnv:
    """What the backend needs, read from the environment the runtime_env gives every worker."""

    metrics_enabled: bool
    metrics_port: int
    metrics_address: str
    job_namespace: str | None
    job_name: str | None
    steps_file: str | None = None
    guardrails: str | None = None  # the GRPOJob's spec.guardrails as JSON; None: defaults (observe)
    attempt: int = 1  # > 1 on an attempt a guardrail rollback started (GRPO_ROLLBACK)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProgressEnv:
        e = os.environ if env is None else env
        return cls(
            metrics_enabled=e.get("GRPO_METRICS_ENABLED", "1") not in ("0", "false", "False"),
            metrics_port=int(e.get("GRPO_METRICS_PORT", "9400")),
            metrics_address=e.get("GRPO_METRICS_ADDRESS", "0.0.0.0"),
            job_namespace=e.get("GRPO_JOB_NAMESPACE") or None,
            job_name=e.get("GRPO_JOB_NAME") or None,
            steps_file=e.get("GRPO_METRICS_STEPS_FILE") or None,
            guardrails=e.get(GUARDRAILS_ENV) or None,
            attempt=attempt_from_env(e),
        )


def total_steps_from(config: Mapping[str, Any] | None) -> int | None:
    """verl writes the computed total into actor.optim before creating Tracking; trainer's is the request."""
    if not config:
        return None
    optim = config.get("actor_rollout_ref", {}).get("actor", {}).get("optim", {}) or {}
    for value in (optim.get("total_training_steps"), config.get("trainer", {}).get("total_training_steps")):
        if isinstance(value, int) and value > 0:
            return value
    return None


def checkpoint_root_from(config: Mapping[str, Any] | None) -> Path | None:
    """Where verl saves checkpoints (trainer.default_local_dir, relative to the driver's working directory
    as verl itself reads it): where a rollback's checkpoint is found and pinned."""
    root = ((config or {}).get("trainer") or {}).get("default_local_dir")
    return Path(root) if isinstance(root, str) and root else None


class GrpoTrackingBackend:
    """A verl tracking backend: `log(data, step)` and `finish()`, like verl's own adapters."""

    def __init__(
        self,
        metrics: TrainerMetrics,
        reporter: StatusReporter | None,
        total_steps: int | None = None,
        steps_file: Path | None = None,
        guardrails: Guardrails | None = None,
        guardrails_error: str | None = None,
        checkpoint_root: Path | None = None,
        clock: Clock | None = None,
        attempt: int = 1,
    ) -> None:
        self.metrics = metrics
        self.reporter = reporter
        self.total_steps = total_steps
        self.steps_file = steps_file
        self.guardrails = guardrails
        self.guardrails_error = guardrails_error
        self.checkpoint_root = checkpoint_root
        self.clock = clock or Clock()
        self.attempt = attempt

    def log(self, data: Mapping[str, Any], step: int) -> None:
        """verl calls this once per step, after the step's checkpoint (if any) was saved. After an act-mode
        trip it does not return: it holds until the operator ends the attempt, or raises when it does not
        (GuardrailHoldExpired, deliberately outside the except clauses below, which keep reporting and
        guardrail bugs from costing a step)."""
        if self.steps_file is not None:
            try:
                append_step(self.steps_file, data, step)
            except OSError:  # a full or read-only volume must not stop training
                log.exception("grpo tracking backend: could not append step %s to %s", step, self.steps_file)
        try:
            m = extract(data, step)
            self.metrics.observe(m, self.total_steps)
        except Exception:  # never let progress reporting break a training step
            log.exception("grpo tracking backend: could not record step %s", step)
            return
        section, action = self._guard(m)
        sent = self._report(m, section)
        if action is None:
            return

        def resend() -> None:  # the operator acts on what the status says: a failed patch is sent again
            nonlocal sent
            sent = sent or self._report(m, section)

        hold(action, self.clock, tick=resend)

    def _report(self, m: StepMetrics, section: dict[str, Any] | None) -> bool:
        if self.reporter is None:
            return False
        return bool(
            self.reporter.report(
                m, self.total_steps, self.metrics.baseline.value, self.metrics.non_finite_count, section
            )
        )

    def _guard(self, m: StepMetrics) -> tuple[dict[str, Any] | None, Action | None]:
        """Run the guardrails on this step: their status section (None when there is nothing to say) and
        the action to hold for (None unless an act-mode detector has just tripped)."""
        if self.guardrails_error is not None:
            return error_section(self.guardrails_error, self.attempt), None
        if self.guardrails is None:
            return None, None
        try:
            already = {s.name for s in self.guardrails.tripped()}
            states = self.guardrails.observe(m)
            self.metrics.guardrails.observe(states)
            for s in states:
                if s.tripped and s.name not in already:
                    log.warning(
                        "guardrail %s tripped at step %s (onset step %s): %s (mode %s)",
                        s.name,
                        s.step,
                        s.onset_step,
                        s.reason,
                        self.guardrails.detector_mode(s.name),
                    )
            trip = self.guardrails.acting_trip()
            if trip is not None:
                self.guardrails.action = self._action_for(trip)
            return self.guardrails.section(), self.guardrails.action if trip is not None else None
        except Exception:  # a guardrail bug must not cost a training step
            log.exception("grpo tracking backend: guardrails failed at step %s", m.step)
            return None, None

    def _action_for(self, trip: DetectorState) -> Action:
        """The action of an act-mode trip: the checkpoint to roll back to, found and pinned (so that
        checkpoints.keep pruning cannot remove it) before the operator is told about it."""
        assert self.guardrails is not None
        onset = trip.onset_step if trip.onset_step is not None else trip.step
        root = self.checkpoint_root
        step = rollback_step(root, onset) if root is not None else None
        if root is not None and step is not None:
            try:
                pin_step(root, step)
            except OSError:  # still roll back: no step is taken while holding, so nothing is pruned meanwhile
                log.exception("guardrails: could not pin checkpoint step %s under %s", step, root)
        action = Action.of(trip, step, self.guardrails.attempt, self.clock.wall(), self.guardrails.config.hold_seconds)
        log.warning(
            "guardrail %s acts: holding up to %s s (no step, no checkpoint) for the operator to roll back to "
            "checkpoint step %s",
            trip.name,
            action.hold_seconds,
            step if step is not None else "none (start again from step 0)",
        )
        return action

    def finish(self) -> None:
        # The HTTP server stays up until the process exits so the last values can still be scraped.
        return


_process_backend: dict[str, GrpoTrackingBackend] = {}


def backend_for_process(config: Mapping[str, Any] | None, env: ProgressEnv) -> GrpoTrackingBackend:
    """One backend (and one HTTP server) per process, however many Tracking objects verl creates."""
    backend = _process_backend.get("backend")
    if backend is None:
        metrics = TrainerMetrics()
        if env.metrics_enabled:
            try:
                metrics.serve(env.metrics_port, env.metrics_address)
            except OSError as e:
                log.warning(
                    "grpo_trainer metrics server not started on %s:%d: %s",
                    env.metrics_address,
                    env.metrics_port,
                    e,
                )
        reporter = StatusReporter(env.job_namespace, env.job_name) if env.job_name and env.job_namespace else None
        guardrails, error = guardrails_for(env)
        if reporter is not None:
            _restore_baseline(metrics, reporter, guardrails)
        backend = GrpoTrackingBackend(
            metrics,
            reporter,
            steps_file=Path(env.steps_file) if env.steps_file else None,
            guardrails=guardrails,
            guardrails_error=error,
            attempt=env.attempt,
        )
        _process_backend["backend"] = backend
    backend.total_steps = total_steps_from(config) or backend.total_steps
    backend.checkpoint_root = checkpoint_root_from(config) or backend.checkpoint_root
    return backend


def guardrails_for(env: ProgressEnv) -> tuple[Guardrails | None, str | None]:
    """The job's guardrails, or (None, why) when its configuration is refused. The driver refuses a bad
    one at start-up (config.worker_env); this is the backstop, and it reports rather than crashes."""
    try:
        return Guardrails(parse_config(env.guardrails), attempt=env.attempt), None
    except GuardrailsConfigError as e:
        log.error("guardrails are off: %s", e)
        return None, str(e)


def _restore_baseline(metrics: TrainerMetrics, reporter: StatusReporter, guardrails: Guardrails | None = None) -> None:
    """A retry resumes past the first steps: keep comparing with the baselines an earlier attempt reported."""
    progress = reporter.progress()
    baseline = progress.get("entropyBaseline")
    if isinstance(baseline, int | float) and not isinstance(baseline, bool):
        metrics.restore_baseline(float(baseline))
    section = progress.get("guardrails")
    if guardrails is not None and isinstance(section, dict) and isinstance(section.get("baselines"), dict):
        guardrails.restore(section["baselines"])


def _install_score_std() -> None:
    # Here, not in the setup hook: Tracking is created by verl's trainer, so its module is loaded
    # already, while importing it in every Ray worker would cost seconds and pull transfer_queue.
    from grpo_trainer.progress import score_std

    try:
        score_std.install()
    except Exception:
        log.exception("critic/score/std will be missing: could not wrap verl's compute_data_metrics")


_install_env: dict[str, ProgressEnv | None] = {"env": None}


def install(env: ProgressEnv | None = None) -> None:
    """Teach verl's Tracking the `grpo` backend in this process (idempotent; the latest env wins, and
    without one the backend reads the environment when verl creates its Tracking)."""
    from verl.utils import tracking

    _install_env["env"] = env
    cls = tracking.Tracking
    if BACKEND_NAME not in cls.supported_backend:
        cls.supported_backend.append(BACKEND_NAME)
    if getattr(cls.__init__, "__grpo_wrapped__", False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(
        self: Any,
        project_name: Any,
        experiment_name: Any,
        default_backend: Any = "console",
        config: Any = None,
    ) -> None:
        original(self, project_name, experiment_name, default_backend, config)
        _install_score_std()
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend or [])
        if BACKEND_NAME in backends:
            self.logger[BACKEND_NAME] = backend_for_process(config, _install_env["env"] or ProgressEnv.from_env())

    __init__.__grpo_wrapped__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__
