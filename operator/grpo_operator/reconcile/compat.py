"""Is the installed KubeRay new enough? Read once at start-up, again while it is not (kuberay.py says why).

Three answers: compatible (never read again), a problem (every job is refused with it and tried
again later; the CRD is read again at most every `recheck_seconds`), or unknown: the operator may not
read CRDs (the chart's single-namespace mode grants nothing cluster-wide). Then each RayJob's strict
creation is the check, and a refusal found there is remembered the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from grpo_operator import kuberay, metrics
from grpo_operator.reconcile.common import SETTINGS
from grpo_operator.runtime import kube

log = logging.getLogger("grpo_operator.compat")


async def _read_rayjob_crd() -> dict[str, Any] | None:
    with kube.call_site("kuberay-version"):
        return await kube.get_crd(kuberay.RAYJOB_CRD)


class KubeRayCompat:
    def __init__(
        self,
        recheck_seconds: float,
        read_crd: Callable[[], Awaitable[dict[str, Any] | None]] = _read_rayjob_crd,
        clock: Callable[[], float] = time.monotonic,
        readable: bool = True,
    ) -> None:
        self.recheck_seconds = recheck_seconds
        self._read_crd = read_crd
        self._clock = clock
        self._compatible = False
        self._readable = readable
        self._problem: str | None = None
        self._at = 0.0
        # Whether the CRD has AUTH_OPTIONS: None until read (or unreadable), then read again at most every
        # recheck_seconds while it has not, so an upgraded KubeRay is seen without a restart.
        self._auth_options: bool | None = None
        self._auth_options_at = 0.0

    @property
    def compatible(self) -> bool:
        """Known compatible: the CRD was read and has every field."""
        return self._compatible

    async def problem(self) -> str | None:
        """None when jobs may be created; else why not, naming the KubeRay version needed."""
        if self._compatible:
            return None
        if self._problem is not None and self._clock() - self._at < self.recheck_seconds:
            return self._problem
        if not self._readable:
            self._problem = None  # a remembered refusal expired: the next strict create checks again
            return None
        try:
            crd = await self._read_crd()
        except kube.ApiError as exc:
            if exc.status not in (401, 403):
                raise
            self._readable = False
            log.warning("cannot read the CRD %s (%s): the KubeRay version is checked when each RayJob is "
                        "created instead", kuberay.RAYJOB_CRD, exc.reason or exc.status)
            return None
        missing = kuberay.NOT_INSTALLED if crd is None else (
            kuberay.unsupported(found) if (found := kuberay.missing_fields(crd)) else None)
        self._learn_auth_options(crd)
        if missing is None:
            self._compatible = True
            self._problem = None
            metrics.KUBERAY_COMPATIBLE.set(1)
            return None
        self.refused(missing)
        return missing

    def _learn_auth_options(self, crd: dict[str, Any] | None) -> None:
        self._know_auth_options(crd is not None and kuberay.serves_auth_options(crd))

    def _know_auth_options(self, served: bool) -> None:
        self._auth_options = served
        self._auth_options_at = self._clock()

    async def job_problem(self, ray_auth: str) -> str | None:
        """None when a job asking for `ray_auth` may be created; else why not (for a token job on a KubeRay
        older than v1.5.1). Unknown (an unreadable CRD) is None: the strict create is the check then."""
        if ray_auth != "token" or self._auth_options is not False:
            return None
        if self._clock() - self._auth_options_at >= self.recheck_seconds:
            if not self._readable:
                self._auth_options = None  # a remembered refusal expired: the next strict create checks again
                return None
            try:
                self._learn_auth_options(await self._read_crd())
            except kube.ApiError as exc:
                log.warning("cannot read the CRD %s again (%s)", kuberay.RAYJOB_CRD, exc.reason or exc.status)
        return None if self._auth_options is not False else kuberay.TOKEN_AUTH_UNSUPPORTED

    def refused_token_auth(self) -> None:
        """A strict create said the CRD lacks AUTH_OPTIONS: later token jobs are refused without trying."""
        self._know_auth_options(False)

    def unsupported(self, refusal: kuberay.KubeRayUnsupported) -> None:
        """Remember what a strict create's refusal says: of the whole KubeRay, or of token jobs only."""
        if refusal.whole_cluster:
            self.refused(refusal.message)
        else:
            self.refused_token_auth()

    def refused(self, problem: str) -> None:
        """Remember a refusal (the CRD's, or the apiserver's at a strict create) for `recheck_seconds`."""
        if problem != self._problem:
            log.error("KubeRay is not usable: %s", problem)
        self._compatible = False
        self._problem = problem
        self._at = self._clock()
        metrics.KUBERAY_COMPATIBLE.set(0)


# The reason of a job refused because the installed KubeRay lacks what it needs (kuberay.py).
UNSUPPORTED_KUBERAY = "UnsupportedKubeRay"

# A job refused for its KubeRay is tried again on the same timer as one waiting for a missing claim.
# An operator watching named namespaces holds no cluster-wide rights (the chart's single-namespace mode):
# it does not try to read the CRD, and strict creation is its check.
COMPAT = KubeRayCompat(SETTINGS.dependency_retry_seconds, readable=not SETTINGS.namespaces)
