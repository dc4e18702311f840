"""The few Kubernetes API calls the handlers make: async, JSON in and out, each one idempotent.

Children have fixed names, so "create, and treat 409 AlreadyExists as done" is safe to repeat after
a crash at any point: a restarted operator ends with exactly one of each child.

Why not the official `kubernetes` client: it is synchronous (every handler held a thread, 32 of them
in a burst), it turns every answer into generated model objects only to turn them back into dicts,
and importing it costs ~20 MB of the operator's memory (kopf imports it too when it is installed).
On this aiohttp session a request costs a fraction of that CPU and handlers await it on kopf's loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf

from grpo_operator import __version__, metrics
from grpo_operator.runtime.job_cache import JobCache
from grpo_operator.runtime.lines import lines_of
from grpo_operator.runtime.priority import REQUEST_PRIORITY, PriorityGate

GROUP, VERSION, PLURAL = "grpo.dev", "v1alpha1", "grpojobs"
RAY_GROUP, RAY_VERSION = "ray.io", "v1"
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = f"grpo-operator/{__version__}"
# An idle TLS connection holds asyncio's read buffer (64 KiB as memory.bound_tls_read_buffer sets it, Python's own
# 256 KiB): a burst opens the whole pool, and at aiohttp's default 15 s keep-alive a steady trickle of events keeps
# it all open afterwards.
KEEPALIVE_SECONDS = 2.0

log = logging.getLogger("grpo_operator.kube")

# The part of the operator a request serves (a handler, a timer, status mirroring). It travels in the User-Agent,
# which the apiserver's audit log records, and labels grpo_operator_api_requests_total: what a job costs the
# apiserver can be traced to the code that asked (bench/operator/bench.py prints the table). Set by each entry
# point with `call_site`; tasks started inside inherit it.
CALL_SITE: ContextVar[str] = ContextVar("grpo_operator_call_site", default="other")


class CallSite:
    """The call site of the requests made inside it, as a sync or an async context manager (beside a lock:
    `async with lock, call_site("mirror"):`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tokens: list[Token[str]] = []

    def __enter__(self) -> None:
        self._tokens.append(CALL_SITE.set(self.name))

    def __exit__(self, *_: object) -> None:
        CALL_SITE.reset(self._tokens.pop())

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *_: object) -> None:
        self.__exit__()


def call_site(name: str) -> CallSite:
    return CallSite(name)


def user_agent(site: str) -> str:
    return f"{USER_AGENT} ({site})"


def request_kind(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) of a request as the apiserver's audit log names them: a GET of a collection is a list,
    of one object a get; the resource keeps its subresource ("grpojobs/status")."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    # /api/<version>/... or /apis/<group>/<version>/..., then [namespaces/<ns>/]<plural>[/<name>[/<subresource>]]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    plural = rest[0] if rest else "?"
    resource = f"{plural}/{rest[2]}" if len(rest) > 2 else plural
    if method == "GET":
        return ("get" if len(rest) > 1 else "list"), resource
    verbs = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
    return verbs.get(method, method.lower()), resource


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str

    @property
    def root(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.root, "namespaces", namespace, self.plural]
        if name is not None:
            parts.append(name)
            if subresource is not None:
                parts.append(subresource)
        return "/".join(parts)

    def collection(self, namespace: str | None) -> str:
        """The path listing (and watching) one namespace's objects, or the whole cluster's with None."""
        return self.path(namespace) if namespace is not None else f"{self.root}/{self.plural}"


RESOURCES: dict[str, Resource] = {
    "ConfigMap": Resource("", "v1", "configmaps"),
    "PersistentVolumeClaim": Resource("", "v1", "persistentvolumeclaims"),
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "Pod": Resource("", "v1", "pods"),
    "Event": Resource("", "v1", "events"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Job": Resource("batch", "v1", "jobs"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies"),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
    "RayJob": Resource(RAY_GROUP, RAY_VERSION, "rayjobs"),
    "GRPOJob": Resource(GROUP, VERSION, PLURAL),
}


NODEPOOLS_PATH = "/apis/karpenter.sh/v1/nodepools"
GRPORUNTIMES_PATH = f"/apis/{GROUP}/{VERSION}/grporuntimes"


async def namespace_labels(namespace: str) -> dict[str, str]:
    """A namespace's labels ({} when it cannot be read: the check that asks treats that as unlabelled)."""
    try:
        found = await _get_or_none(f"/api/v1/namespaces/{namespace}", None)
    except ApiError as exc:
        if exc.status != 403:  # rbac.runtimes off: the pods' own admission says it instead
            raise
        found = None
    return dict(((found or {}).get("metadata") or {}).get("labels") or {})


class ApiError(Exception):
    """A Kubernetes API answer other than success, with the Status object's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class RetryPolicy:
    """Transient API failures (a restarting apiserver, 429 from priority and fairness, a dropped
    connection) are retried with backoff, for every verb: creates are safe to repeat because a
    repeated create answers 409 AlreadyExists, which create_if_absent treats as done, and the
    patches are merge patches of the same content."""

    attempts: int = 7
    base_delay: float = 0.25  # 0.25, 0.5, 1, 2, 4, 4 s
    max_delay: float = 4.0
    retry_statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based); the server's Retry-After wins."""
        if retry_after is not None:
            try:
                return min(float(retry_after), self.max_delay * 4)
            except ValueError:
                pass
        backoff = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
        return backoff * random.uniform(0.8, 1.0)  # de-synchronise a burst of retries

    def retryable_status(self, status: int) -> bool:
        return status in self.retry_statuses


TRANSIENT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)


def error_from(status: int, text: str) -> ApiError:
    """The apiserver answers errors with a Status object; anything else (a proxy's page) is kept as text."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError(status, str(body.get("reason") or ""), str(body.get("message") or ""))
    return ApiError(status, "", text[:500])


Login = Callable[[], Awaitable[kopf.ConnectionInfo | None]]


def bounded_session(
    info: kopf.ConnectionInfo, max_connections: int, headers: Mapping[str, str] | None = None,
    keepalive: float = KEEPALIVE_SECONDS, **options: Any
) -> aiohttp.ClientSession:
    """An HTTP session with `info`'s credentials, at most `max_connections` connections, kept `keepalive` seconds.

    kopf's session (the login handler), the handlers' Client and the leader elector's are made here: unbounded, a
    burst opens a connection per object, each with asyncio's TLS read buffer (memory.bound_tls_read_buffer), and at
    aiohttp's default 15 s keep-alive a trickle of events keeps them all open; the elector's one connection is kept
    past its retry period.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=max_connections, keepalive_timeout=keepalive, ssl=info.as_ssl_context()
        ),
        headers={**info.as_http_headers(), **(headers or {})},  # basic auth or token, as kopf sends them
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        **options,
    )


class Client:
    """One aiohttp session to the apiserver, with kopf's own ways to find credentials."""

    def __init__(self, login: Login, max_connections: int, retry: RetryPolicy = RetryPolicy(),
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        self._login = login
        self._max_connections = max_connections
        self._retry = retry
        self._keepalive = keepalive
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self._lock = asyncio.Lock()
        # As many as the session's connections: requests beyond them wait here, in priority order,
        # rather than in aiohttp's connector, first come first served (priority.py).
        self._gate = PriorityGate(max_connections)

    async def _connect(self, stale: aiohttp.ClientSession | None = None) -> aiohttp.ClientSession:
        async with self._lock:
            if self._session is not None and self._session is not stale:
                return self._session  # another request has logged in again already
            info = await self._login()
            if info is None:
                raise kopf.LoginError("no Kubernetes credentials: neither a service account nor a kubeconfig")
            if self._session is not None:
                await self._session.close()
            self._session = bounded_session(
                info,
                self._max_connections,
                headers={"User-Agent": USER_AGENT},
                keepalive=self._keepalive,
                timeout=aiohttp.ClientTimeout(total=60, sock_connect=10),
            )
            self._server = info.server.rstrip("/")
            return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _exchange(
        self, session: aiohttp.ClientSession, method: str, url: str, **options: Any
    ) -> tuple[int, str, str | None]:
        """One request and its whole answer, holding one of the gate's slots: (status, text, Retry-After)."""
        await self._gate.acquire(REQUEST_PRIORITY.get())
        try:
            async with session.request(method, url, **options) as response:
                return response.status, await response.text(), response.headers.get("Retry-After")
        finally:
            self._gate.release()

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        answer: bool = True,
    ) -> dict[str, Any]:
        """The apiserver's answer, parsed; with `answer=False` it is not parsed and {} is returned (a create's
        answer is the whole object, a RayJob's tens of KB, that nobody here reads)."""
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        site = CALL_SITE.get()
        headers = {"User-Agent": user_agent(site)}
        if data is not None:
            headers["Content-Type"] = content_type
        verb, resource = request_kind(method, path)
        relogged = False
        attempt = 0
        while True:
            attempt += 1
            session = self._session or await self._connect()
            metrics.count_api_request(verb, resource, site)
            try:
                status, text, retry_after = await self._exchange(
                    session, method, self._server + path, data=data, headers=headers, params=params
                )
                if status < 300:
                    return json.loads(text) if text and answer else {}
                if status == 401 and not relogged:
                    relogged = True  # a rotated service-account token: read it again, once
                    await self._connect(stale=session)
                    attempt -= 1
                    continue
                error = error_from(status, text)
                if not self._retry.retryable_status(status) or attempt >= self._retry.attempts:
                    raise error
                delay = self._retry.delay(attempt, retry_after)
            except TRANSIENT_ERRORS as exc:
                if attempt >= self._retry.attempts:
                    raise
                delay = self._retry.delay(attempt)
                error = exc
            log.debug("%s %s: %s; retry %d in %.2f s", method, path, error, attempt, delay)
            await asyncio.sleep(delay)

    async def stream_lines(self, path: str, params: Mapping[str, str], read_timeout: float) -> AsyncIterator[bytes]:
        """A watch's body, line by line, until the server ends it. Outside the request gate: a watch holds its
        connection for minutes and must not take a slot the handlers' requests wait for. An error answer is
        raised (ApiError); the caller decides how to resume."""
        session = self._session or await self._connect()
        site = CALL_SITE.get()
        metrics.count_api_request("watch", request_kind("GET", path)[1], site)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout)
        async with session.get(self._server + path, params=params, timeout=timeout,
                               headers={"User-Agent": user_agent(site)}) as response:
            if response.status == 401:
                await self._connect(stale=session)  # a rotated token: the caller's retry logs in again
            if response.status >= 300:
                raise error_from(response.status, await response.text())
            async for line in lines_of(response.content.iter_any()):
                yield line


def credentials(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
    """In a pod its service account, else the kubeconfig: kopf's own readers, no client library."""
    return kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)


_client: Client | None = None


def configure(client: Client) -> None:
    global _client
    _client = client


def api() -> Client:
    if _client is None:
        raise RuntimeError("grpo_operator.runtime.kube is not configured (the operator's startup handler does it)")
    return _client


# The apiserver refuses (instead of silently pruning) a field the object's schema lacks: an older CRD then
# says which field it does not know (kuberay.py).
STRICT = {"fieldValidation": "Strict"}


async def create_if_absent(body: dict) -> bool:
    """Create `body`; True if this call created it, False if it already existed."""
    resource = RESOURCES[body["kind"]]
    try:
        await api().request("POST", resource.path(body["metadata"]["namespace"]), body, params=STRICT, answer=False)
    except ApiError as exc:
        if exc.status == 409:
            return False
        raise
    return True


async def _get_or_none(path: str, client: Client | None) -> dict | None:
    try:
        return await (client or api()).request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def get(kind: str, namespace: str, name: str, client: Client | None = None) -> dict | None:
    """The object, None when there is none; `client`: another than the handlers' (the leader election's)."""
    return await _get_or_none(RESOURCES[kind].path(namespace, name), client)


async def exists(kind: str, namespace: str, name: str) -> bool:
    return await get(kind, namespace, name) is not None


async def get_crd(name: str, client: Client | None = None) -> dict | None:
    """A CustomResourceDefinition (cluster-scoped), None when it is not installed."""
    return await _get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", client)


# Every GRPOJob version the watch delivered or a write of ours answered with (job_cache.py says why that is
# what a GET would return); the watch handler feeds it, the status and spec writes below too.
JOBS = JobCache()


async def get_grpojob(namespace: str, name: str) -> dict | None:
    """The GRPOJob as the apiserver has it now (kept in JOBS)."""
    job = await get("GRPOJob", namespace, name)
    if job is None:
        JOBS.forget(namespace, name)
    else:
        JOBS.remember(job)
    return job


async def current_grpojob(namespace: str, name: str) -> dict | None:
    """The newest version of the GRPOJob this process saw or wrote; read from the API only when it saw none."""
    return JOBS.get(namespace, name) or await get_grpojob(namespace, name)


async def patch_grpojob_status(namespace: str, name: str, status: dict, resource_version: str | None = None) -> dict:
    """Merge `status` in; with `resource_version`, only if the GRPOJob is still that version (else 409).
    Returns the GRPOJob as the apiserver wrote it."""
    path = RESOURCES["GRPOJob"].path(namespace, name, "status")
    body: dict[str, Any] = {"status": status}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    written = await api().request("PATCH", path, body, content_type=MERGE_PATCH)
    JOBS.remember(written)
    return written


async def patch_grpojob_spec(namespace: str, name: str, spec: dict) -> dict:
    """Merge `spec` into the GRPOJob's spec (the guardrails' suspension: the GRPOJob's own suspend)."""
    path = RESOURCES["GRPOJob"].path(namespace, name)
    written = await api().request("PATCH", path, {"spec": spec}, content_type=MERGE_PATCH)
    JOBS.remember(written)
    return written


async def delete(kind: str, namespace: str, name: str, uid: str | None = None) -> None:
    """Delete (its dependents in the background); with `uid`, only that very object. Gone already is done."""
    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    if uid is not None:
        body["preconditions"] = {"uid": uid}
    try:
        await api().request("DELETE", RESOURCES[kind].path(namespace, name), body, answer=False)
    except ApiError as exc:
        if exc.status not in (404, 409):  # 409: the uid precondition failed, someone replaced it already
            raise


async def create_or_replace(body: dict, digest_of: Callable[[dict], str | None], attempts: int = 5) -> str:
    """Create `body`; if one exists with another digest, delete it and create `body`.

    "created", "current" (an existing one has the same digest) or "replaced". For children rendered
    again from an edited spec before training starts: the verl ConfigMap (immutable) and the preflight
    Job (a Job's pod template cannot change).
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    replaced = False
    for _ in range(attempts):
        if await create_if_absent(body):
            return "replaced" if replaced else "created"
        existing = await get(body["kind"], namespace, name)
        if existing is None:
            continue  # deleted meanwhile: create again
        if digest_of(existing) == digest_of(body):
            return "current"
        await delete(body["kind"], namespace, name, uid=existing["metadata"].get("uid"))
        replaced = True
    raise ApiError(409, "Conflict", f"{body['kind']} {namespace}/{name} kept coming back while being replaced")


async def list_nodes(label_selector: str) -> list[dict]:
    """Nodes matching a label selector ("" for all); cluster-scoped, read-only."""
    params = {"labelSelector": label_selector} if label_selector else None
    found = await api().request("GET", "/api/v1/nodes", params=params)
    return found.get("items") or []


async def patch_rayjob_suspend(namespace: str, name: str, suspend: bool) -> None:
    path = RESOURCES["RayJob"].path(namespace, name)
    await api().request("PATCH", path, {"spec": {"suspend": suspend}}, content_type=MERGE_PATCH)


@dataclass(frozen=True)
class ClaimFacts:
    """What the handlers need of a PersistentVolumeClaim: how it may be mounted, whether it is bound, and whose
    provisioner binds it (its StorageClass)."""

    access_modes: tuple[str, ...]
    phase: str
    created: str = ""  # metadata.creationTimestamp
    storage_class: str = ""  # spec.storageClassName; "" for none
    uid: str = ""  # metadata.uid: which claim of that name an Event is about (one deleted and made again)


def claim_facts_of(claim: Mapping[str, Any]) -> ClaimFacts:
    return ClaimFacts(
        access_modes=tuple((claim.get("spec") or {}).get("accessModes") or ()),
        phase=str((claim.get("status") or {}).get("phase") or "Pending"),
        created=str((claim.get("metadata") or {}).get("creationTimestamp") or ""),
        # Interned: a namespace's thousand claims name a few classes, and the waiting check keeps them all.
        storage_class=sys.intern(str((claim.get("spec") or {}).get("storageClassName") or "")),
        uid=str((claim.get("metadata") or {}).get("uid") or ""),
    )


async def claim_facts(namespace: str, name: str) -> ClaimFacts | None:
    found = await get("PersistentVolumeClaim", namespace, name)
    return None if found is None else claim_facts_of(found)


async def job_pods(namespace: str, job: str) -> list[dict]:
    """The pods of one GRPOJob (the operator's, KubeRay's and the Jobs' pods all carry its label)."""
    params = {"labelSelector": f"grpo.dev/job={job}"}
    found = await api().request("GET", RESOURCES["Pod"].path(namespace), params=params)
    return found.get("items") or []


async def workloads_in(namespace: str) -> list[dict]:
    """Kueue's Workloads of the namespace (v1beta2, else the older v1beta1); none where Kueue is not installed."""
    for version in ("v1beta2", "v1beta1"):
        try:
            found = await api().request("GET", f"/apis/kueue.x-k8s.io/{version}/namespaces/{namespace}/workloads")
        except ApiError as exc:
            if exc.status == 404:
                continue
            if exc.status == 403:
                return []
            raise
        return found.get("items") or []
    return []


async def list_nodepools() -> list[dict]:
    """Karpenter's NodePools; none where Karpenter is not installed (its CRD is missing) or may not be read."""
    try:
        found = await api().request("GET", NODEPOOLS_PATH)
    except ApiError as exc:
        if exc.status in (403, 404):
            return []
        raise
    return found.get("items") or []


async def patch_rayjob_ttl(namespace: str, name: str, seconds: int) -> None:
    """How long KubeRay keeps the RayJob's RayCluster after it finished (spec.ttlSecondsAfterFinished)."""
    path = RESOURCES["RayJob"].path(namespace, name)
    await api().request("PATCH", path, {"spec": {"ttlSecondsAfterFinished": seconds}}, content_type=MERGE_PATCH)


async def configmap_keys(namespace: str, name: str) -> set[str] | None:
    found = await get("ConfigMap", namespace, name)
    if found is None:
        return None
    return set((found.get("data") or {}).keys()) | set((found.get("binaryData") or {}).keys())


def termination_message(pods: list[dict]) -> dict | None:
    """The converter's JSON summary from its termination log, newest pod first (pure)."""
    newest_first = sorted(pods, key=lambda p: p.get("metadata", {}).get("creationTimestamp") or "", reverse=True)
    for pod in newest_first:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            message = terminated.get("message")
            if message:
                try:
                    return json.loads(message)
                except json.JSONDecodeError:
                    return {"message": message.strip()}
    return None


async def job_termination_message(namespace: str, job_name: str) -> dict | None:
    """The converter writes a JSON summary to its termination log; read it back from the pod."""
    found = await api().request(
        "GET", RESOURCES["Pod"].path(namespace), params={"labelSelector": f"job-name={job_name}"}
    )
    return termination_message(found.get("items") or [])
