"""grpo_operator.runtime.kube against a real HTTP server on 127.0.0.1 that answers like a kube-apiserver would:
transient failures are retried with backoff, a 401 logs in again, a repeated create counts as done,
and errors that are the user's or the cluster's come out with the apiserver's reason and message."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import kopf
import pytest
from aiohttp import web
from grpo_operator.runtime import kube

FAST = kube.RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02)


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message}
    return web.json_response(body, status=code)


@asynccontextmanager
async def apiserver(handler: Callable[[web.Request], Any]) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def client_for(server: str, tokens: list[str] | None = None, retry: kube.RetryPolicy = FAST) -> kube.Client:
    handed = iter(tokens or ["t0"])

    async def login() -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=server, token=next(handed), scheme="Bearer")

    return kube.Client(login, max_connections=4, retry=retry)


@asynccontextmanager
async def operator_client(
    handler: Callable[[web.Request], Any], tokens: list[str] | None = None
) -> AsyncIterator[None]:
    """grpo_operator.runtime.kube configured against a fake apiserver answering with `handler`."""
    async with apiserver(handler) as server:
        client = client_for(server, tokens)
        kube.configure(client)
        try:
            yield
        finally:
            await client.close()


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def test_resource_paths_for_core_and_group_apis() -> None:
    assert kube.RESOURCES["ConfigMap"].path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert kube.RESOURCES["RayJob"].path("ns", "a") == "/apis/ray.io/v1/namespaces/ns/rayjobs/a"
    assert (
        kube.RESOURCES["GRPOJob"].path("ns", "a", "status") == "/apis/grpo.dev/v1alpha1/namespaces/ns/grpojobs/a/status"
    )


def test_error_keeps_the_status_reason_and_message() -> None:
    err = kube.error_from(422, json.dumps({"kind": "Status", "reason": "Invalid", "message": "spec.x: bad"}))
    assert (err.status, err.reason, err.message) == (422, "Invalid", "spec.x: bad")
    assert kube.error_from(502, "<html>bad gateway</html>").message == "<html>bad gateway</html>"


def test_backoff_doubles_up_to_its_cap_and_honours_retry_after() -> None:
    policy = kube.RetryPolicy(base_delay=0.25, max_delay=4.0)
    delays = [policy.delay(n) for n in range(1, 8)]
    assert all(
        0.8 * min(0.25 * 2 ** (n - 1), 4.0) <= d <= min(0.25 * 2 ** (n - 1), 4.0) for n, d in enumerate(delays, 1)
    )
    assert policy.delay(1, retry_after="3") == 3.0
    assert policy.delay(1, retry_after="soon") <= 0.25


def test_transient_503_and_429_are_retried_until_success() -> None:
    answers = [status(503, "ServiceUnavailable", "etcd"), status(429, "TooManyRequests", "apf"), None]
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.method)
        answer = answers.pop(0)
        return answer or web.json_response({"metadata": {"name": "a"}, "data": {"k": "v"}})

    async def scenario() -> Any:
        async with operator_client(handler):
            return await kube.configmap_keys("ns", "a")

    assert run(scenario) == {"k"}
    assert seen == ["GET", "GET", "GET"]


def test_retries_stop_after_the_policy_attempts_with_the_last_error() -> None:
    calls = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return status(503, "ServiceUnavailable", "still starting")

    async def scenario() -> None:
        async with operator_client(handler):
            await kube.get("RayJob", "ns", "a")

    with pytest.raises(kube.ApiError, match="still starting") as info:
        run(scenario)
    assert info.value.status == 503 and calls == FAST.attempts


def test_client_errors_are_not_retried_and_404_reads_as_absent() -> None:
    calls: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(request.path)
        if request.method == "GET":
            return status(404, "NotFound", "not found")
        return status(422, "Invalid", "spec.entrypoint: Required value")

    async def scenario() -> tuple[Any, BaseException | None]:
        async with operator_client(handler):
            absent = await kube.get("PersistentVolumeClaim", "ns", "models")
            body = {"kind": "RayJob", "metadata": {"name": "a", "namespace": "ns"}}
            try:
                await kube.create_if_absent(body)
            except kube.ApiError as exc:
                return absent, exc
            return absent, None

    absent, error = run(scenario)
    assert absent is None
    assert isinstance(error, kube.ApiError) and error.reason == "Invalid" and "spec.entrypoint" in error.message
    assert len(calls) == 2


def test_repeated_create_answered_409_counts_as_done() -> None:
    bodies: list[dict] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        if len(bodies) == 1:
            return web.json_response(bodies[0], status=201)
        return status(409, "AlreadyExists", 'configmaps "a" already exists')

    async def scenario() -> list[bool]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}
        async with operator_client(handler):
            return [await kube.create_if_absent(body), await kube.create_if_absent(body)]

    assert run(scenario) == [True, False]
    assert bodies[0]["metadata"]["name"] == "a"


def test_401_logs_in_again_once_with_fresh_credentials() -> None:
    auth: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        auth.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer t1":
            return status(401, "Unauthorized", "token expired")
        return web.json_response({}, status=200)

    async def scenario() -> None:
        async with operator_client(handler, tokens=["t0", "t1"]):
            await kube.patch_rayjob_suspend("ns", "a", True)

    run(scenario)
    assert auth == ["Bearer t0", "Bearer t1"]


def test_merge_patches_send_the_merge_patch_content_type() -> None:
    got: list[tuple[str, str, dict]] = []

    async def handler(request: web.Request) -> web.Response:
        got.append((request.path, request.headers["Content-Type"], await request.json()))
        return web.json_response({})

    async def scenario() -> None:
        async with operator_client(handler):
            await kube.patch_grpojob_status("ns", "a", {"phase": "Running"})

    run(scenario)
    assert got == [
        ("/apis/grpo.dev/v1alpha1/namespaces/ns/grpojobs/a/status", kube.MERGE_PATCH, {"status": {"phase": "Running"}})
    ]


def test_a_refused_connection_is_retried_then_reported() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({})

    async def scenario() -> None:
        async with apiserver(answer) as server:
            pass  # closed again: nothing listens on that port now
        client = client_for(server)
        kube.configure(client)
        try:
            await kube.get("Job", "ns", "a")
        finally:
            await client.close()

    with pytest.raises(kube.TRANSIENT_ERRORS):
        run(scenario)


def test_termination_message_prefers_the_newest_pod_and_keeps_plain_text() -> None:
    def pod(created: str, message: str | None) -> dict:
        terminated = {"message": message} if message else {}
        return {
            "metadata": {"creationTimestamp": created},
            "status": {"containerStatuses": [{"state": {"terminated": terminated}}]},
        }

    older, newer = pod("2026-01-01T00:00:00Z", '{"ok": false}'), pod("2026-01-01T00:05:00Z", '{"ok": true}')
    assert kube.termination_message([older, newer]) == {"ok": True}
    assert kube.termination_message([pod("2026-01-01T00:00:00Z", "killed\n")]) == {"message": "killed"}
    assert kube.termination_message([pod("2026-01-01T00:00:00Z", None)]) is None


def test_operator_imports_without_the_kubernetes_client() -> None:
    # The operator image has no `kubernetes` package; importing the handlers must not need it.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'kubernetes': raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import grpo_operator.reconcile, grpo_operator.__main__\n"
        "print('kubernetes' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_create_or_replace_keeps_a_current_child_and_replaces_a_stale_one_by_uid() -> None:
    stored: dict[str, dict] = {"cm": {"metadata": {"name": "cm", "uid": "u1", "annotations": {"d": "old"}}}}
    seen: list[tuple[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        body = json.loads(await request.text()) if request.can_read_body else None
        seen.append((request.method, body.get("preconditions") if request.method == "DELETE" else None))
        if request.method == "POST":
            if body["metadata"]["name"] in stored:
                return status(409, "AlreadyExists", "exists")
            stored[body["metadata"]["name"]] = body
            return web.json_response(body, status=201)
        name = request.path.rsplit("/", 1)[-1]
        if request.method == "DELETE":
            stored.pop(name)
            return web.json_response({})
        return web.json_response(stored[name]) if name in stored else status(404, "NotFound", name)

    def body(digest: str) -> dict:
        return {"kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns", "annotations": {"d": digest}}}

    def digest_of(obj: dict) -> str:
        return obj["metadata"]["annotations"]["d"]

    async def scenario() -> list[str]:
        async with operator_client(handler):
            return [await kube.create_or_replace(body("old"), digest_of),
                    await kube.create_or_replace(body("new"), digest_of)]

    assert run(scenario) == ["current", "replaced"]
    assert ("DELETE", {"uid": "u1"}) in seen and stored["cm"]["metadata"]["annotations"] == {"d": "new"}


def test_status_patch_with_a_resource_version_carries_the_precondition() -> None:
    bodies: list[dict] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(json.loads(await request.text()))
        if bodies[-1].get("metadata", {}).get("resourceVersion") == "7":
            return status(409, "Conflict", "the object has been modified")
        return web.json_response({})

    async def scenario() -> int:
        async with operator_client(handler):
            await kube.patch_grpojob_status("ns", "a", {"phase": "Pending"}, resource_version="8")
            try:
                await kube.patch_grpojob_status("ns", "a", {"phase": "Pending"}, resource_version="7")
            except kube.ApiError as exc:
                return exc.status
            return 0

    assert run(scenario) == 409
    assert bodies[0] == {"status": {"phase": "Pending"}, "metadata": {"resourceVersion": "8"}}


def test_nodes_are_listed_with_the_label_selector() -> None:
    queries: list[dict] = []

    async def handler(request: web.Request) -> web.Response:
        queries.append({"path": request.path, **request.query})
        return web.json_response({"items": [{"metadata": {"name": "n0"}}]})

    async def scenario() -> list[dict]:
        async with operator_client(handler):
            return [*await kube.list_nodes("grpo.dev/pool=train"), *await kube.list_nodes("")]

    assert [n["metadata"]["name"] for n in run(scenario)] == ["n0", "n0"]
    assert queries == [{"path": "/api/v1/nodes", "labelSelector": "grpo.dev/pool=train"}, {"path": "/api/v1/nodes"}]


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/apis/grpo.dev/v1alpha1/namespaces/ns/grpojobs/a", ("get", "grpojobs")),
    ("PATCH", "/apis/grpo.dev/v1alpha1/namespaces/ns/grpojobs/a/status", ("patch", "grpojobs/status")),
    ("POST", "/api/v1/namespaces/ns/configmaps?fieldValidation=Strict", ("create", "configmaps")),
    ("GET", "/api/v1/namespaces/ns/events", ("list", "events")),
    ("GET", "/api/v1/nodes", ("list", "nodes")),
    ("GET", "/api/v1/namespaces/ns", ("get", "namespaces")),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayjobs.ray.io",
     ("get", "customresourcedefinitions")),
    ("DELETE", "/apis/ray.io/v1/namespaces/ns/rayjobs/r", ("delete", "rayjobs")),
])
def test_requests_are_named_as_the_audit_log_names_them(method: str, path: str, expected: tuple[str, str]) -> None:
    assert kube.request_kind(method, path) == expected


def test_each_request_says_its_call_site_in_the_user_agent_and_is_counted_once_per_attempt() -> None:
    from grpo_operator import metrics

    agents: list[str] = []
    answers = iter([503, 200, 200])

    async def handler(request: web.Request) -> web.Response:
        agents.append(request.headers["User-Agent"])
        code = next(answers)
        return status(code, "ServiceUnavailable", "x") if code != 200 else web.json_response({"kind": "Pod"})

    def counted(site: str) -> float:
        return metrics.API_REQUESTS.labels(verb="get", resource="pods", call_site=site)._value.get()

    async def main() -> None:
        async with operator_client(handler):
            with kube.call_site("mirror"):
                await kube.get("Pod", "ns", "p")  # a 503, then the answer: two requests
            await kube.get("Pod", "ns", "p")

    before = counted("mirror"), counted("other")
    run(main)
    assert agents == [f"{kube.USER_AGENT} (mirror)"] * 2 + [f"{kube.USER_AGENT} (other)"]
    assert (counted("mirror") - before[0], counted("other") - before[1]) == (2, 1)
