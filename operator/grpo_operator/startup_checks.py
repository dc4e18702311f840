"""What the operator checks at start-up, on every replica, before it follows or leads (and again while a check
fails, runner.py): each problem is one log line and a failing readiness (health.py), never a silent difference in
what a GRPOJob means."""

from __future__ import annotations

import logging

from grpo_operator import crd_check
from grpo_operator.runtime import kube

log = logging.getLogger("grpo_operator")


async def problems(client: kube.Client, readable: bool = True) -> list[str]:
    """Problems that make this operator unfit to reconcile; an apiserver that does not answer yet is not one
    (kopf's own start waits for it). `readable`: whether it may read CRDs at all (not in single-namespace mode)."""
    try:
        problem = await crd_check.grpojob_crd_problem(read=lambda: crd_check.read_grpojob_crd(client),
                                                      readable=readable)
    except (kube.ApiError, *kube.TRANSIENT_ERRORS) as exc:
        log.warning("could not check the installed GRPOJob CRD's version at start-up: %s", exc)
        return []
    return [problem] if problem else []
