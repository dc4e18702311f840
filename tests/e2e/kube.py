"""Small helpers the e2e tests share: read objects through one API client and wait for conditions.

Reads take kubectl's words (`get(cluster, "pods", "-n", ns, "-l", selector)`) but go through the cluster's
keep-alive API client (grpo_devcluster.kubeapi): a poll costs a request, not a `kubectl` process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import kopf
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.kubeapi import ApiError, KubeApi, WaitTimeout
from grpo_operator.runtime import kube as operator_kube

__all__ = ["ApiError", "WaitTimeout", "api", "create_namespace", "delete_namespace", "get", "items",
           "operator_client", "wait_event", "wait_for", "wait_object"]

_FLAGS = {"-n": "namespace", "--namespace": "namespace", "-l": "labels", "--selector": "labels",
          "--field-selector": "fields"}


def api(cluster: LocalCluster) -> KubeApi:
    return cluster.api


def operator_client() -> operator_kube.Client:
    """The operator's own API client, logged in from $KUBECONFIG (the test sets it to the cluster's)."""
    settings = kopf.OperatorSettings()

    async def login() -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(settings=settings)

    return operator_kube.Client(login, max_connections=2)


def _parse(args: tuple[str, ...]) -> tuple[str, str | None, dict[str, str]]:
    """kubectl get's words: RESOURCE [NAME] [-n NS] [-l SELECTOR] [--field-selector SELECTOR]."""
    positional: list[str] = []
    options: dict[str, str] = {}
    words = list(args)
    while words:
        word = words.pop(0)
        flag, eq, value = word.partition("=")
        if flag in _FLAGS:
            options[_FLAGS[flag]] = value if eq else words.pop(0)
        elif word.startswith("-"):
            raise ValueError(f"kube.get understands -n, -l and --field-selector, not {word!r}")
        else:
            positional.append(word)
    resource, _, name = positional[0].partition("/")
    if len(positional) > 1:
        name = positional[1]
    return resource, name or None, options


def get(cluster: LocalCluster, *args: str) -> Any:
    """The object (`get(cluster, "grpojob", name, "-n", ns)`) or the list (`get(cluster, "pods", "-n", ns)`)."""
    resource, name, options = _parse(args)
    client = api(cluster)
    if name:
        return client.get(resource, name, options.get("namespace"))
    return client.list(resource, options.get("namespace"), options.get("labels"), options.get("fields"))


def items(cluster: LocalCluster, *args: str) -> list[dict]:
    return get(cluster, *args)["items"]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90, interval: float = 0.25) -> Any:
    """Return check()'s first truthy value; fail with `what` and the last value seen after `timeout`.

    For conditions over several objects; one object's state is better waited for with wait_object."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


def wait_object(cluster: LocalCluster, resource: str, name: str, namespace: str | None,
                check: Callable[[dict | None], Any], timeout: float = 90, what: str | None = None) -> Any:
    """check(object, or None while it does not exist)'s first truthy value, from a watch of the object."""
    return api(cluster).wait(resource, name, namespace, check, timeout,
                             what or f"{resource} {namespace + '/' if namespace else ''}{name}")


def create_namespace(cluster: LocalCluster, name: str) -> str:
    """The namespace, once its default ServiceAccount exists (pods need it)."""
    client = api(cluster)
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_object(cluster, "serviceaccounts", "default", name, lambda sa: sa is not None, 60,
                f"default ServiceAccount in {name}")
    return name


def delete_namespace(cluster: LocalCluster, name: str, wait_for_jobs: bool = False) -> None:
    """Delete the namespace and everything in it; with `wait_for_jobs`, its GRPOJobs first, returning once they
    are gone (an operator started afterwards then finds none of them; the rest goes in the background)."""
    client = api(cluster)
    if wait_for_jobs:
        for job in client.items("grpojobs", name):
            client.delete("grpojobs", job["metadata"]["name"], name)
        wait_for(f"the GRPOJobs of namespace {name} deleted", lambda: not client.items("grpojobs", name),
                 timeout=180)
    client.delete("namespaces", name)


def wait_event(cluster: LocalCluster, namespace: str, name: str, reason: str, kind: str | None = "Warning",
               timeout: float = 60) -> dict:
    """The Event about object `name` with `reason` (and type `kind`), once it is there: the operator posts an
    Event after the status it explains, so a test that has seen the status waits for the Event."""
    def posted() -> dict | None:
        for event in items(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"):
            if event["reason"] == reason and (kind is None or event["type"] == kind):
                return event
        return None

    return wait_for(f"a {kind or ''} Event {reason} about {namespace}/{name}", posted, timeout)
