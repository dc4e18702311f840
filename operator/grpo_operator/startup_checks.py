"""What the operator checks once at start-up, on every replica, before it follows or leads: each problem is
one log line and a failing readiness (health.py), never a silent difference in what a GRPOJob means."""

from __future__ import annotations

import logging
from typing import Any

from grpo_operator import crd_check
from grpo_operator.crd import CRD_NAME
from grpo_operator.runtime import kube

log = logging.getLogger("grpo_operator")

CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"


async def problems(client: kube.Client, readable: bool = True) -> list[str]:
    """Problems that make this operator unfit to reconcile; an apiserver that does not answer yet is not one
    (kopf's own start waits for it). `readable`: whether it may read CRDs at all (not in single-namespace mode)."""

    async def read() -> dict[str, Any] | None:
        try:
            with kube.call_site("crd-version"):
                return await client.request("GET", CRD_PATH)
        except kube.ApiError as exc:
            if exc.status == 404:
                return None
            raise

    try:
        problem = await crd_check.grpojob_crd_problem(read=read, readable=readable)
    except (kube.ApiError, *kube.TRANSIENT_ERRORS) as exc:
        log.warning("could not check the installed GRPOJob CRD's version at start-up: %s", exc)
        return []
    return [problem] if problem else []
