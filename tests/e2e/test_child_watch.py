"""The operator's own watch of its children (runtime/watch.py, used for RayJobs) against the real apiserver:
label-selected events in order, a resumed watch that sees what happened while it was down, and a relist (what a
410 Gone leads to) reporting the objects deleted meanwhile.
ConfigMaps stand for RayJobs: the watch is the same for any kind, and these need no KubeRay."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from grpo_devcluster.cluster import LocalCluster
from grpo_operator.runtime import kube
from grpo_operator.runtime.watch import ChildWatch

from .kube import operator_client

LABEL = "grpo.dev/watch-test"


async def _until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_the_child_watch_reports_changes_resumes_and_lists_again_after_410(
        cluster: LocalCluster, scratch_ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    events: list[tuple[str, str, dict]] = []

    def kubectl(*args: str) -> None:
        cluster.kubectl(*args, "-n", scratch_ns)

    def create(name: str, labelled: bool = True) -> None:
        kubectl("create", "configmap", name, "--from-literal=v=1")
        if labelled:
            kubectl("label", "configmap", name, f"{LABEL}=yes")

    def seen(kind: str, name: str) -> bool:
        return any(e[:2] == (kind, name) for e in events)

    async def scenario() -> None:
        client = operator_client()
        watch = ChildWatch(client, kube.RESOURCES["ConfigMap"].collection(scratch_ns), LABEL,
                           lambda kind, obj: events.append((kind, obj["metadata"]["name"], obj)), server_timeout=30)
        try:
            create("present")
            task = asyncio.create_task(watch.run_forever())
            await _until("the listing", lambda: seen("ADDED", "present"))
            create("later")
            create("unlabelled", labelled=False)
            kubectl("label", "configmap", "present", "extra=1")
            kubectl("delete", "configmap", "present")
            await _until("the deletion", lambda: seen("DELETED", "present"))
            # "later" and "unlabelled" are created without the label: a labelled one appears (ADDED) only once
            # labelled, the other never
            assert [e[:2] for e in events] == [("ADDED", "present"), ("ADDED", "later"), ("MODIFIED", "present"),
                                                ("DELETED", "present")]

            task.cancel()  # down: what happens now must be seen when it resumes from its resourceVersion
            await asyncio.gather(task, return_exceptions=True)
            events.clear()
            kubectl("delete", "configmap", "later")
            create("while-down")
            task = asyncio.create_task(watch.run_forever())
            await _until("the resumed watch", lambda: seen("ADDED", "while-down"))
            await _until("the deletion while down", lambda: seen("DELETED", "later"))
            # the apiserver's own DELETED event (a whole object), not a relist's: the watch resumed
            assert "resourceVersion" in next(e for e in events if e[:2] == ("DELETED", "later"))[2]["metadata"]

            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            events.clear()
            kubectl("delete", "configmap", "while-down")
            create("after-expiry")
            # What a 410 Gone makes the watch do (the apiserver no longer has its resourceVersion; which answers
            # 410 is unit-tested: a fresh apiserver's watch cache still holds its whole history): list again
            watch.resource_version = None
            task = asyncio.create_task(watch.run_forever())
            await _until("the relist", lambda: seen("ADDED", "after-expiry") and seen("DELETED", "while-down"))
            deleted = next(e for e in events if e[:2] == ("DELETED", "while-down"))[2]
            # reported from what the watch kept, since no event told it: the relist found it gone
            assert deleted == {"metadata": {"namespace": scratch_ns, "name": "while-down",
                                            "labels": {LABEL: "yes"}}}
            assert not seen("ADDED", "unlabelled") and not seen("MODIFIED", "unlabelled")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await client.close()

    asyncio.run(scenario())
