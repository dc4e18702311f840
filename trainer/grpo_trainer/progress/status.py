"""GRPOJob `status.progress` through the Kubernetes API: a merge patch on the status subresource.

The pod's service account may only get/patch grpojobs/status of its own job, so this is the only
call made. Failing to report never stops training: it is logged and the next step tries again.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from grpo_trainer.progress.step_metrics import StepMetrics

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "grpo.dev", "v1alpha1", "grpojobs"


def build_progress_patch(
    m: StepMetrics,
    total_steps: int | None,
    now: datetime,
    entropy_baseline: float | None = None,
    non_finite_steps: int | None = None,
    guardrails: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Pure: the merge patch body for `status.progress` (absent metrics are left out, not nulled).

    `guardrails` is grpo_trainer.guardrails' section (Guardrails.section()), passed through as it is."""
    progress: dict[str, Any] = {
        "step": m.step,
        "updatedAt": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if total_steps is not None:
        progress["totalSteps"] = int(total_steps)
    # rounded: a status line is read by people (kubectl get), not used for arithmetic
    for key, value in (
        ("rewardMean", m.reward_mean),
        ("klDivergence", m.kl_loss),
        ("entropy", m.entropy),
        ("responseLengthMean", m.response_length_mean),
        ("entropyBaseline", entropy_baseline),
    ):
        if value is not None:
            progress[key] = round(float(value), 6)
    if non_finite_steps is not None:
        progress["nonFiniteSteps"] = int(non_finite_steps)
    if guardrails is not None:
        progress["guardrails"] = guardrails
    return {"status": {"progress": progress}}


class StatusReporter:
    """Patches one GRPOJob's status; every failure is logged, none is raised."""

    def __init__(self, namespace: str, name: str, api: Any | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self._api = api
        self._disabled = False

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            config.load_incluster_config()
            self._api = client.CustomObjectsApi()
        return self._api

    def progress(self) -> dict[str, Any]:
        """The job's status.progress as an earlier attempt left it ({} when unknown), e.g. its entropy baseline."""
        if self._disabled:
            return {}
        try:
            job = self._client().get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except Exception as e:  # best effort, as report() is
            if type(e).__name__ == "ConfigException":
                self._disabled = True
            log.warning("could not read %s/%s status.progress: %s", self.namespace, self.name, e)
            return {}
        return dict(((job or {}).get("status") or {}).get("progress") or {})

    def report(
        self,
        m: StepMetrics,
        total_steps: int | None,
        entropy_baseline: float | None = None,
        non_finite_steps: int | None = None,
        guardrails: dict[str, Any] | None = None,
    ) -> bool:
        body = build_progress_patch(m, total_steps, datetime.now(UTC), entropy_baseline, non_finite_steps, guardrails)
        return self.patch(body, f"status.progress at step {m.step}")

    def patch(self, body: dict[str, Any], what: str) -> bool:
        """A merge patch of the status subresource; `what` names it in the log if it fails."""
        if self._disabled:
            return False
        try:
            self._client().patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                self.name,
                body,
                _content_type="application/merge-patch+json",
            )
            return True
        except Exception as e:  # reporting is best effort: training matters more than its status line
            if type(e).__name__ == "ConfigException":
                # not in a pod (no service account): stop trying, once
                self._disabled = True
            log.warning("could not patch %s/%s %s: %s", self.namespace, self.name, what, e)
            return False
