"""The floor under the operator's step: the least any operator creating our children could do.

Watches GRPOJobs in one namespace and, for each new one, creates the same seven children the
operator does, its default NetworkPolicy included (rendered by the operator's own code, with the same HTTP
client and connection bound) in one concurrent wave: no kopf, no dependency reads, no ordering, no status, no
Events. What it takes on a machine is what the apiserver, etcd and the rest of the control plane allow there;
`bench.py --floor` runs it in the operator's place, so "ours / floor" is the operator's own cost.

  KUBECONFIG=... python bench/operator/floor.py NAMESPACE

Not a product component: it would create children for invalid specs and never report anything.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import kopf
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import plan
from grpo_operator.render import NetworkPeers, render_children
from grpo_operator.runtime import kube
from grpo_operator.runtime.watch import ChildWatch


def children_of(job: dict) -> list[dict]:
    meta = job["metadata"]
    spec = GRPOJobSpec.model_validate(job["spec"])
    bodies = render_children(spec, plan(spec, name=meta["name"], namespace=meta["namespace"],
                                        default_image="grpo-trainer:floor"), network_policy=NetworkPeers())
    for body in bodies:
        kopf.adopt(body, owner=job)
    return bodies


async def create_children(job: dict) -> None:
    await asyncio.gather(*(kube.create_if_absent(body) for body in children_of(job)))


async def watch_and_create(namespace: str) -> None:
    settings = kopf.OperatorSettings()

    async def login() -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(settings=settings)

    client = kube.Client(login, max_connections=32)
    kube.configure(client)
    tasks: set[asyncio.Task] = set()
    handled: set[str] = set()  # UIDs whose children were asked for: a relist (after a 410) reports every job again

    def on_event(kind: str, job: dict[str, Any]) -> None:
        uid = job["metadata"]["uid"]
        if kind == "ADDED" and uid not in handled:
            handled.add(uid)
            task = asyncio.create_task(create_children(job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    # The operator's own list-then-watch (as for RayJobs): it resumes from the last resource version when the
    # apiserver ends a watch (it does, often, for a reader as busy rendering as this loop in a burst), so no job is
    # listed again unless the version expired.
    watch = ChildWatch(client, kube.RESOURCES["GRPOJob"].path(namespace), "", on_event)
    print("floor: watching", namespace, flush=True)
    await watch.run_forever()


if __name__ == "__main__":
    asyncio.run(watch_and_create(sys.argv[1]))
