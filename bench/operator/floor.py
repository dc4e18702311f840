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
import json
import sys

import kopf
from grpo_operator.api import GRPOJobSpec
from grpo_operator.plan import plan
from grpo_operator.render import NetworkPeers, render_children
from grpo_operator.runtime import kube


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
    info = await login()
    assert info is not None, "no kubeconfig"
    session = kube.bounded_session(info, 4)
    path = kube.RESOURCES["GRPOJob"].path(namespace)
    tasks: set[asyncio.Task] = set()
    handled: set[str] = set()  # UIDs whose children were asked for: a watch started again lists every job again
    version: str | None = None
    print("floor: watching", namespace, flush=True)
    async with session:
        while True:
            # From where the last watch ended: an apiserver closes the watch of a client too busy to read it (the
            # burst's renders keep this loop busy), and a watch without a version starts with every job again.
            params = {"watch": "1", "allowWatchBookmarks": "true", **({"resourceVersion": version} if version else {})}
            async with session.get(info.server.rstrip("/") + path, params=params, timeout=None) as response:
                if response.status != 200:  # 429 from priority and fairness while the control plane starts
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                async for line in response.content:
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # 410 Gone: the version is too old; list anew
                        version = None
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    uid = event["object"]["metadata"].get("uid")
                    if event.get("type") == "ADDED" and uid not in handled:
                        handled.add(uid)
                        task = asyncio.create_task(create_children(event["object"]))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(watch_and_create(sys.argv[1]))
