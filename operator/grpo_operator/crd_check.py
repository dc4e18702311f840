"""Is the installed GRPOJob CRD the one this operator was built with?

Helm installs the CRDs in a chart's crds/ on the first install and never again: `helm upgrade` brings a new
operator and leaves the old schema in place. The apiserver then prunes every field the old schema lacks from
each GRPOJob, silently, and the operator reads defaults where the user wrote values. The generated CRD carries
the operator's version as a label (crd.py's VERSION_LABEL); this module compares it with the running operator's
and says, in one sentence, what is installed, what runs and what to do.

``crd_mismatch`` is the pure judgement; ``grpojob_crd_problem`` reads the CRD and judges it (for a start-up or
readiness check). Reading a CRD is a cluster-wide right: the chart's cluster-wide mode grants ``get`` on this
one CRD, its single-namespace mode grants nothing cluster-wide. There the caller passes ``readable=False`` and
nothing is asked (as reconcile/compat.py does for the RayJob CRD); a read refused all the same (401/403: RBAC
of one's own) is None with a logged note. Either way the check never blocks a namespaced install.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from grpo_operator import __version__
from grpo_operator.crd import CRD_NAME, VERSION_LABEL
from grpo_operator.runtime import kube

log = logging.getLogger("grpo_operator.crd_check")

APPLY_CRDS = "kubectl apply --server-side -f charts/grpo-operator/crds/"
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def installed_version(crd: Mapping[str, Any]) -> str | None:
    """The operator version the CRD was generated for; None for a CRD from before the label, or one edited by hand."""
    labels = (crd.get("metadata") or {}).get("labels") or {}
    version = labels.get(VERSION_LABEL)
    return str(version) if version else None


def _release(version: str) -> tuple[int, int, int] | None:
    """MAJOR.MINOR.PATCH of a version (pre-release and build suffixes ignored); None if it has none."""
    found = _RELEASE.match(version)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def _is_newer(installed: str, own: str) -> bool:
    theirs, ours = _release(installed), _release(own)
    return theirs is not None and ours is not None and theirs > ours


def crd_mismatch(crd: Mapping[str, Any] | None, own_version: str) -> str | None:
    """None when the installed GRPOJob CRD (None: not installed) is the one of `own_version`; else one sentence
    naming the installed version (or its absence), the operator's, and the fix."""
    if crd is None:
        return (f"The GRPOJob CRD ({CRD_NAME}) is not installed and this operator is {own_version}: install it with "
                f"`{APPLY_CRDS}` from the chart of version {own_version}.")
    installed = installed_version(crd)
    if installed == own_version:
        return None
    if installed is None:
        return (f"The installed GRPOJob CRD ({CRD_NAME}) has no {VERSION_LABEL} label (it predates {own_version} or "
                f"was applied by hand) and this operator is {own_version}: apply this version's CRD with "
                f"`{APPLY_CRDS}` from the chart of version {own_version} (Helm never upgrades CRDs).")
    if _is_newer(installed, own_version):
        # Applying the older schema would make the apiserver prune the newer fields of existing GRPOJobs.
        return (f"The installed GRPOJob CRD ({CRD_NAME}) is version {installed}, newer than this operator "
                f"({own_version}): upgrade the operator to {installed} rather than applying the older CRD, which "
                "would drop the newer fields from existing GRPOJobs.")
    return (f"The installed GRPOJob CRD ({CRD_NAME}) is version {installed} but this operator is {own_version}: "
            f"apply this version's CRD with `{APPLY_CRDS}` from the chart of version {own_version} "
            "(Helm never upgrades CRDs).")


async def read_grpojob_crd(client: kube.Client | None = None) -> dict[str, Any] | None:
    """The installed GRPOJob CRD, None when there is none; a refusal (403 in single-namespace mode) raises
    kube.ApiError. `client`: another than the handlers' (the start-up checks run before kopf)."""
    with kube.call_site("crd-version"):
        return await kube.get_crd(CRD_NAME, client)


CrdReader = Callable[[], Awaitable[Mapping[str, Any] | None]]


async def grpojob_crd_problem(own_version: str = __version__, read: CrdReader = read_grpojob_crd,
                              readable: bool = True) -> str | None:
    """crd_mismatch of the CRD the apiserver has now.

    `readable=False` (pass ``not settings.namespaces``): the chart's single-namespace mode may not read CRDs, so
    nothing is asked and the answer is None; a request known to be refused would only leave a Forbidden in the
    operator's log and the apiserver's audit log. A read refused anyway (401/403) cannot tell either: None, and a
    note in the log on each call, so call it at start-up or keep its answer rather than asking on every probe.
    Any other API error raises, as kube.get_crd does."""
    if not readable:
        return None
    try:
        crd = await read()
    except kube.ApiError as exc:
        if exc.status not in (401, 403):
            raise
        log.info("cannot read the CRD %s (%s): the installed GRPOJob schema's version is not checked",
                 CRD_NAME, exc.reason or exc.status)
        return None
    return crd_mismatch(crd, own_version)
