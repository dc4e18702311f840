"""`hack/images --push`, for real: the operator image built from its Dockerfile goes to a container registry
(distribution v3, built from its Go module like the cluster, on 127.0.0.1), and the registry serves it under the
name and tag the chart pulls (issue 30: the chart's default images existed in no registry, and no command of ours
could put them in one).

Beside the real node's tests because it needs what they need: root, buildah and the images they build.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_devcluster import processes
from grpo_devcluster.build import binary
from grpo_devcluster.cluster import LocalCluster
from grpo_devcluster.components import REGISTRY
from grpo_devcluster.images import chart_version
from grpo_devcluster.operator_runner import ROOT

from .conftest import NodeImages

pytestmark = pytest.mark.e2e

MANIFEST_TYPES = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    port = processes.free_ports(1)[0]
    config = tmp_path / "registry.yml"
    config.write_text(json.dumps({"version": 0.1, "log": {"level": "warn"},
                                  "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
                                  "http": {"addr": f"127.0.0.1:{port}"}}))
    started = processes.start("registry", [str(binary(REGISTRY, "registry")), "serve", str(config)], tmp_path)
    try:
        processes.wait_until("registry", lambda: processes.http_ok(f"http://127.0.0.1:{port}/v2/"), started, 30)
        yield f"127.0.0.1:{port}"
    finally:
        processes.stop_group(started.pid)


def _get(url: str, accept: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as response:
        return json.loads(response.read())


def test_hack_images_pushes_the_operator_image_where_the_chart_pulls_it(
        real_node: LocalCluster, node_images: NodeImages, registry: str) -> None:
    pushed = subprocess.run([str(ROOT / "hack" / "images"), "--push", registry, "--tls-verify", "false", "operator"],
                            capture_output=True, text=True, timeout=600, check=False)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    version = chart_version()
    assert f"operator: {registry}/grpo-operator:{version}" in pushed.stdout
    assert f"--set image.repository={registry}/grpo-operator --set image.tag={version}" in pushed.stdout
    assert _get(f"http://{registry}/v2/grpo-operator/tags/list")["tags"] == [version]
    manifest = _get(f"http://{registry}/v2/grpo-operator/manifests/{version}", MANIFEST_TYPES)
    assert manifest["layers"] and manifest["config"]["digest"].startswith("sha256:")
