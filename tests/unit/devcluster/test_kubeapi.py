"""The e2e tests' API client, its pure parts: paths, credentials, and kubectl's words for a read."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from grpo_devcluster.kubeapi import ApiError, Credentials, Resource

PODS = Resource("v1", "pods", "Pod", namespaced=True)
NODES = Resource("v1", "nodes", "Node", namespaced=False)
RAYJOBS = Resource("ray.io/v1", "rayjobs", "RayJob", namespaced=True)


def test_paths_of_core_group_cluster_scoped_and_subresources() -> None:
    assert PODS.path("team", "p") == "/api/v1/namespaces/team/pods/p"
    assert PODS.path() == "/api/v1/pods"  # every namespace
    assert NODES.path("ignored", "n1", "status") == "/api/v1/nodes/n1/status"
    assert RAYJOBS.path("team") == "/apis/ray.io/v1/namespaces/team/rayjobs"


def test_credentials_from_a_kubeconfig_with_files_or_inline_data(tmp_path: Path) -> None:
    config = {"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
              "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443",
                                                     "certificate-authority": "/pki/ca.crt"}}],
              "users": [{"name": "u", "user": {"client-certificate-data": base64.b64encode(b"CERT").decode(),
                                               "client-key": "/pki/admin.key"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    creds = Credentials.from_kubeconfig(path)
    assert (creds.server, creds.ca_file, creds.key_file, creds.token) == (
        "https://127.0.0.1:6443", "/pki/ca.crt", "/pki/admin.key", None)
    assert Path(creds.cert_file or "").read_bytes() == b"CERT"


def test_an_error_carries_the_status_reason_and_message_kubectl_would_print() -> None:
    body = '{"kind":"Status","reason":"Invalid","message":"GRPOJob.grpo.dev \\"x\\" is invalid: spec.data: bad"}'
    error = ApiError(422, body, "create GRPOJob")
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.message == 'GRPOJob.grpo.dev "x" is invalid: spec.data: bad'
    assert "create GRPOJob: 422 Invalid" in str(error)
    assert ApiError(502, "<html>bad gateway</html>", "get").message == "<html>bad gateway</html>"


@pytest.mark.parametrize(("words", "parsed"), [
    (("grpojob", "j", "-n", "team"), ("grpojob", "j", {"namespace": "team"})),
    (("pods", "-n", "team", "-l", "a=b"), ("pods", None, {"namespace": "team", "labels": "a=b"})),
    (("events", "--field-selector=involvedObject.name=j"), ("events", None, {"fields": "involvedObject.name=j"})),
    (("crd/grpojobs.grpo.dev",), ("crd", "grpojobs.grpo.dev", {})),
])
def test_kubectl_words_for_a_read(words: tuple[str, ...], parsed: tuple) -> None:
    from e2e.kube import _parse

    assert _parse(words) == parsed


def test_a_kubectl_flag_the_reader_does_not_know_is_refused() -> None:
    from e2e.kube import _parse

    with pytest.raises(ValueError, match="-o"):
        _parse(("pods", "-o", "json"))
