"""The waiting check's namespace lists (runtime/delta_list.py) against the real apiserver: the first look lists, the
later ones ask only for the changes since (a watch from the last resourceVersion, ended by the apiserver after a
second) and end up where a list would; a look whose watch fails lists again. ConfigMaps and Events stand for the
claims and Events the operator looks at: the mechanism is the same for any kind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from grpo_devcluster.cluster import LocalCluster
from grpo_operator.reconcile import pods
from grpo_operator.runtime import kube
from grpo_operator.runtime.delta_list import DeltaList

from .kube import operator_client

LABEL = "grpo.dev/delta-test"


def _value(obj: dict[str, Any]) -> str:
    return str((obj.get("data") or {}).get("v"))


def test_a_namespace_list_kept_by_its_changes_matches_a_fresh_list(
        cluster: LocalCluster, scratch_ns: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))

    def kubectl(*args: str, input: str | None = None) -> None:
        cluster.kubectl(*args, "-n", scratch_ns, input=input)

    def configmap(name: str, value: str, labelled: bool = True) -> None:
        kubectl("create", "configmap", name, f"--from-literal=v={value}")
        if labelled:
            kubectl("label", "configmap", name, f"{LABEL}=yes")

    def event(name: str, kind: str, type_: str, message: str) -> None:
        body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
                "involvedObject": {"kind": kind, "name": f"{name}-object", "namespace": scratch_ns},
                "type": type_, "reason": "Test", "message": message,
                "lastTimestamp": "2026-12-07T00:00:00Z", "firstTimestamp": "2026-12-07T00:00:00Z"}
        kubectl("create", "-f", "-", input=yaml.safe_dump(body))

    async def scenario() -> None:
        client = operator_client()
        monkeypatch.setattr(kube, "_client", client)
        lists: list[str] = []
        real_request = client.request

        async def counted(method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            lists.append(path)
            return await real_request(method, path, *args, **kwargs)

        monkeypatch.setattr(client, "request", counted)
        configmaps = DeltaList(kube.RESOURCES["ConfigMap"].path, _value, {"labelSelector": LABEL})
        warnings = DeltaList(kube.RESOURCES["Event"].path, pods.pod_warning_of,
                             {"fieldSelector": "involvedObject.kind=Pod,type=Warning"})
        try:
            configmap("a", "1")
            configmap("b", "1")
            configmap("unlabelled", "1", labelled=False)
            event("pulled", "Pod", "Warning", "Back-off pulling image")
            event("normal", "Pod", "Normal", "Pulled")
            event("claim", "PersistentVolumeClaim", "Warning", "ProvisioningFailed")
            assert await configmaps.current(scratch_ns) == {"a": "1", "b": "1"}
            assert list(await warnings.current(scratch_ns)) == ["pulled"]
            assert len(lists) == 2

            kubectl("create", "configmap", "c", "--from-literal=v=1")  # labelled later: it appears then
            kubectl("patch", "configmap", "a", "-p", '{"data": {"v": "2"}}')
            kubectl("delete", "configmap", "b")
            kubectl("label", "configmap", "c", f"{LABEL}=yes")
            kubectl("patch", "configmap", "unlabelled", "-p", '{"data": {"v": "2"}}')
            event("crash", "Pod", "Warning", "Back-off restarting failed container")
            kubectl("delete", "event", "pulled")
            assert await configmaps.current(scratch_ns) == {"a": "2", "c": "1"}
            crash = (await warnings.current(scratch_ns))
            assert list(crash) == ["crash"] and crash["crash"].pod == "crash-object"
            assert len(lists) == 2, "the later looks ask for the changes only: no list"
            # Unchanged: the same answer, still without a list.
            assert await configmaps.current(scratch_ns) == {"a": "2", "c": "1"} and len(lists) == 2

            # A look whose watch the apiserver refuses (here a resourceVersion it cannot parse; in a cluster, one
            # compacted past, 410 Gone) lists again, and answers what a list answers.
            configmaps._kept[scratch_ns].version = "not-a-version"
            kubectl("delete", "configmap", "a")
            assert await configmaps.current(scratch_ns) == {"c": "1"} and len(lists) == 3
            # Said once (a watch RBAC refuses would fail every period): the operator's log tells why it lists.
            refusals = [r for r in caplog.records if "listing it whole instead" in r.getMessage()]
            assert len(refusals) == 1 and refusals[0].levelname == "WARNING"
            configmaps._kept[scratch_ns].version = "not-a-version"
            assert await configmaps.current(scratch_ns) == {"c": "1"} and len(lists) == 4
            assert len([r for r in caplog.records if "listing it whole instead" in r.getMessage()]) == 1
        finally:
            await client.close()

    asyncio.run(scenario())
