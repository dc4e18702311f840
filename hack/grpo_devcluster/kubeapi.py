"""A small synchronous client of the Kubernetes API: what the local cluster's waits and the e2e tests need.

One keep-alive HTTPS connection per thread (a request costs a few milliseconds, where a `kubectl` process
costs a few hundred of CPU on a 2-core machine), resource names resolved by the API's own discovery (plural,
singular, short names, `kind.group`), and waits that watch the object instead of polling it.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ApiError(RuntimeError):
    """The API answered with an error status; `status` and the Status object's `reason` and `message`."""

    def __init__(self, status: int, body: str, what: str) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        self.status = status
        self.body = body
        self.reason = parsed.get("reason", "") if isinstance(parsed, dict) else ""
        self.message = parsed.get("message", body) if isinstance(parsed, dict) else body
        super().__init__(f"{what}: {status} {self.reason}: {self.message}")


class WaitTimeout(AssertionError):
    """A wait ran past its deadline; says what it waited for and the last state seen."""


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" for the core group, else "group/version"
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        parts = [base]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        config = yaml.safe_load(Path(path).read_text())
        context_name = config.get("current-context") or config["contexts"][0]["name"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        return cls(cluster["server"], _file_of(cluster, "certificate-authority"),
                   _file_of(user, "client-certificate"), _file_of(user, "client-key"), user.get("token"))


def _file_of(section: dict, key: str) -> str | None:
    """A kubeconfig's `key` or `key-data` (written to a private temporary file, as ssl needs a path)."""
    if key in section:
        return str(section[key])
    data = section.get(f"{key}-data")
    if data is None:
        return None
    with tempfile.NamedTemporaryFile("wb", prefix="kubeapi-", suffix=".pem", delete=False) as handle:
        handle.write(base64.b64decode(data))
    return handle.name


class KubeApi:
    """The API of one cluster, as one user."""

    def __init__(self, credentials: Credentials, timeout: float = 30.0) -> None:
        self.credentials = credentials
        url = urllib.parse.urlsplit(credentials.server)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=credentials.ca_file)
        if credentials.cert_file:
            self.context.load_cert_chain(credentials.cert_file, credentials.key_file)
        self._local = threading.local()
        self._resources: dict[str, Resource] = {}
        self._discovery_lock = threading.Lock()

    @classmethod
    def from_kubeconfig(cls, path: Path, timeout: float = 30.0) -> KubeApi:
        return cls(Credentials.from_kubeconfig(path), timeout)

    # -- transport -----------------------------------------------------------------------------------
    def _connection(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=timeout or self.timeout)

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "grpo-devcluster-kubeapi"}
        if content_type:
            headers["Content-Type"] = content_type
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        return headers

    def text(self, path: str) -> str:
        """A GET whose answer is text, not JSON (a metrics endpoint through the apiserver's proxy)."""
        return self.request("GET", path, decode=False)

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", what: str | None = None, decode: bool = True) -> Any:
        """One request on this thread's keep-alive connection (re-opened once if the server closed it)."""
        url = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        for attempt in (0, 1):
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = self._local.connection = self._connection()
            try:
                connection.request(method, url, body=payload,
                                   headers=self._headers(content_type if payload is not None else None))
                response = connection.getresponse()
                data = response.read()
            except (TimeoutError, http.client.HTTPException, ConnectionError, ssl.SSLError, OSError):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
                continue
            if response.status >= 400:
                raise ApiError(response.status, data.decode(errors="replace"), what or f"{method} {path}")
            if not decode:
                return data.decode(errors="replace")
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    # -- discovery -----------------------------------------------------------------------------------
    def resource(self, name: str) -> Resource:
        """The resource a kubectl-style name means: `pods`, `pod`, `po`, `rayjob`, `grpojobs.grpo.dev`, `pvc`."""
        key = name.lower()
        found = self._resources.get(key)
        if found is None:
            with self._discovery_lock:
                self._discover()
            found = self._resources.get(key)
        if found is None:
            raise ApiError(404, json.dumps({"reason": "NotFound", "message": f"no resource named {name!r}"}),
                           "discovery")
        return found

    def _discover(self) -> None:
        """Read every group's preferred version (a new CRD is found by the next lookup that misses)."""
        names: dict[str, Resource] = {}
        versions = [("", "v1")]
        for group in self.request("GET", "/apis")["groups"]:
            versions.append((group["name"], group["preferredVersion"]["groupVersion"]))
        # Core first: a short name both a core and a group resource claim ("events") stays the core one.
        for group, group_version in versions:
            path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            try:
                listed = self.request("GET", path)["resources"]
            except ApiError:
                continue  # a group whose aggregated server is not ready is left out
            for item in listed:
                if "/" in item["name"]:
                    continue  # subresources
                resource = Resource(group_version, item["name"], item["kind"], item["namespaced"])
                aliases = [item["name"], item.get("singularName") or item["kind"].lower(), item["kind"].lower(),
                           *item.get("shortNames", [])]
                for alias in aliases:
                    names.setdefault(alias.lower(), resource)
                    if group:
                        names.setdefault(f"{alias.lower()}.{group}", resource)
        self._resources = names

    # -- verbs ---------------------------------------------------------------------------------------
    def get(self, resource: str, name: str, namespace: str | None = None) -> dict:
        return self.request("GET", self.resource(resource).path(namespace, name),
                            what=f"get {resource} {namespace + '/' if namespace else ''}{name}")

    def find(self, resource: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            return self.get(resource, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, resource: str, namespace: str | None = None, labels: str | None = None,
             fields: str | None = None) -> dict:
        query = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        return self.request("GET", self.resource(resource).path(namespace), query, what=f"list {resource}")

    def items(self, resource: str, namespace: str | None = None, labels: str | None = None,
              fields: str | None = None) -> list[dict]:
        return self.list(resource, namespace, labels, fields)["items"]

    def create(self, manifest: dict, dry_run: bool = False) -> dict:
        resource = self.resource(f"{manifest['kind'].lower()}.{_group(manifest)}" if _group(manifest)
                                 else manifest["kind"].lower())
        namespace = manifest.get("metadata", {}).get("namespace")
        query = {"fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
        return self.request("POST", resource.path(namespace), query, manifest, what=f"create {manifest['kind']}")

    def apply(self, manifest: dict, field_manager: str = "grpo-tests", namespace: str | None = None) -> dict:
        """Server-side apply (forced), as `kubectl apply --server-side --force-conflicts` does."""
        group = _group(manifest)
        resource = self.resource(f"{manifest['kind'].lower()}.{group}" if group else manifest["kind"].lower())
        metadata = manifest.setdefault("metadata", {})
        if namespace and resource.namespaced:
            metadata.setdefault("namespace", namespace)
        return self.request("PATCH", resource.path(metadata.get("namespace"), metadata["name"]),
                            {"fieldManager": field_manager, "force": "true", "fieldValidation": "Strict"},
                            json.dumps(manifest).encode(), "application/apply-patch+yaml",
                            what=f"apply {manifest['kind']} {metadata['name']}")

    def patch(self, resource: str, name: str, namespace: str | None, patch: Any, kind: str = "merge",
              subresource: str | None = None) -> dict:
        content = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
                   "strategic": "application/strategic-merge-patch+json"}[kind]
        return self.request("PATCH", self.resource(resource).path(namespace, name, subresource), None,
                            json.dumps(patch).encode(), content, what=f"patch {resource} {name}")

    def delete(self, resource: str, name: str, namespace: str | None = None, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", self.resource(resource).path(namespace, name),
                         body={"propagationPolicy": "Background"}, what=f"delete {resource} {name}")
        except ApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    # -- watches -------------------------------------------------------------------------------------
    def watch(self, resource: str, namespace: str | None = None, resource_version: str | None = None,
              labels: str | None = None, fields: str | None = None, seconds: float = 60) -> Iterator[dict]:
        """Events (`{"type", "object"}`) after `resource_version`, until the server ends the watch at `seconds`."""
        query: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "false",
                                 "timeoutSeconds": max(1, int(seconds))}
        for key, value in (("resourceVersion", resource_version), ("labelSelector", labels),
                           ("fieldSelector", fields)):
            if value:
                query[key] = value
        connection = self._connection(timeout=seconds + 10)
        try:
            connection.request("GET", self.resource(resource).path(namespace) + "?" + urllib.parse.urlencode(query),
                               headers=self._headers())
            response = connection.getresponse()
            if response.status >= 400:
                raise ApiError(response.status, response.read().decode(errors="replace"), f"watch {resource}")
            while True:
                line = response.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            connection.close()

    def wait(self, resource: str, name: str, namespace: str | None, check: Callable[[dict | None], Any],
             timeout: float, what: str) -> Any:
        """check(object or None when absent)'s first truthy value, read from a watch of that one object.

        Every state the object passes through reaches `check`, in order (a poll can miss a short one)."""
        deadline = time.monotonic() + timeout
        selector = f"metadata.name={name}"
        last: dict | None = None
        while time.monotonic() < deadline:
            try:
                listed = self.list(resource, namespace, fields=selector)
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)  # the apiserver restarting
                continue
            last = listed["items"][0] if listed["items"] else None
            result = check(last)
            if result:
                return result
            version = listed["metadata"]["resourceVersion"]
            try:
                while (left := deadline - time.monotonic()) > 0:
                    ended = True
                    for event in self.watch(resource, namespace, version, fields=selector, seconds=min(left, 60)):
                        if event["type"] == "ERROR":  # usually 410 Gone: list again
                            ended = False
                            break
                        if event["type"] == "BOOKMARK":
                            continue
                        version = event["object"]["metadata"]["resourceVersion"]
                        last = None if event["type"] == "DELETED" else event["object"]
                        result = check(last)
                        if result:
                            return result
                    if not ended:
                        break
            except ApiError as exc:
                if exc.status != 410:
                    raise
            except (OSError, http.client.HTTPException):
                time.sleep(0.5)
        raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last state: "
                          f"{json.dumps(last)[:2000] if last is not None else 'absent'}")

def _group(manifest: dict) -> str:
    api_version = manifest["apiVersion"]
    return api_version.split("/", 1)[0] if "/" in api_version else ""
