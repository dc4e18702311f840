"""grpo-operator: run the kopf operator.

  grpo-operator [--namespace NS ...] [--standalone | --peering NAME] [--leader-elect LEASE] [--liveness URL]

Settings come from GRPO_OPERATOR_* environment variables (see settings.py); the Helm chart sets them.
With --leader-elect the replicas race for the Lease LEASE in $POD_NAMESPACE and only its holder runs kopf
(leader.py). --liveness names where /healthz and /readyz are served (health.py), on every replica.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

import kopf

from grpo_operator import leader, runner
from grpo_operator.runtime import memory
from grpo_operator.settings import OperatorSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="grpo-operator", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=None,
        help="watch this namespace (repeatable); default: GRPO_OPERATOR_NAMESPACES or all",
    )
    parser.add_argument(
        "--standalone", action="store_true", help="no peering with other operator replicas (local runs)"
    )
    parser.add_argument(
        "--peering",
        default=None,
        metavar="NAME",
        help="kopf peering object shared with other replicas (the Helm chart creates it); must exist",
    )
    parser.add_argument(
        "--leader-elect",
        default=None,
        metavar="LEASE",
        help="run kopf only while holding this coordination.k8s.io Lease in $POD_NAMESPACE (several replicas)",
    )
    parser.add_argument("--liveness", default=None, help="serve /healthz and /readyz here, e.g. http://0.0.0.0:8081")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if not args.verbose:
        # kopf logs "Handler '...' succeeded." at INFO for every watch event: ~13 lines per job, and
        # the CPU to format them, saying nothing a failure would not (failures log at WARNING and up).
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings = OperatorSettings.from_env()
    memory.bound_tls_read_buffer(settings.tls_read_buffer_bytes)  # before kopf or a client connects
    namespaces = args.namespace or list(settings.namespaces)

    import grpo_operator.reconcile  # noqa: F401  registers the handlers
    from grpo_operator.reconcile import startup

    startup.serve_namespaces(namespaces)

    kopf_settings = kopf.OperatorSettings()
    # Named namespaces need no cluster-wide view: without scanning, kopf serves exactly those and the
    # CRDs present at start-up (no namespace/CRD watch), so single-namespace RBAC needs no ClusterRole.
    kopf_settings.scanning.disabled = bool(namespaces)

    async def run_kopf(stop_flag: asyncio.Event, ready_flag: asyncio.Event) -> None:
        await kopf.operator(
            settings=kopf_settings,
            # One leader at a time already: kopf's own peering would only add its writes.
            standalone=args.standalone or args.leader_elect is not None,
            peering_name=args.peering,
            clusterwide=not namespaces,
            namespaces=namespaces,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )

    plan = runner.RunPlan(
        identity=runner.identity(os.environ),
        lease=args.leader_elect,
        lease_namespace=os.environ.get("POD_NAMESPACE", ""),
        health_url=args.liveness,
        timing=leader.Timing(settings.lease_duration_seconds, settings.renew_deadline_seconds,
                             settings.retry_period_seconds),
        reads_crds=not namespaces,
    )
    sys.exit(asyncio.run(runner.run(plan, run_kopf, kopf_settings, settings)))


if __name__ == "__main__":
    main()
