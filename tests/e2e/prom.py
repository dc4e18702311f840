"""The Debian package's Prometheus, started by a test on 127.0.0.1, and its query API."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from grpo_devcluster import processes


@dataclass(frozen=True)
class Prometheus:
    url: str

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        return self._get(url)["result"]

    def rule_groups(self) -> list[dict]:
        return self._get(f"{self.url}/api/v1/rules")["groups"]

    def targets(self) -> list[dict]:
        return self._get(f"{self.url}/api/v1/targets")["activeTargets"]

    @staticmethod
    def _get(url: str) -> dict:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]


@contextlib.contextmanager
def prometheus(workdir: Path, scrape_configs: list[dict], rules: list[Path] = ()) -> Iterator[Prometheus]:
    """Prometheus with these scrape configs (1 s interval) and rule files, and a throw-away TSDB."""
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(r) for r in rules],
        "scrape_configs": scrape_configs,
    }))
    (port,) = processes.free_ports(1)
    started = processes.start("prometheus", [
        "prometheus", f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], workdir)
    url = f"http://127.0.0.1:{port}"
    try:
        processes.wait_until("prometheus", lambda: processes.http_ok(f"{url}/-/ready"), started, 60)
        yield Prometheus(url)
    finally:
        processes.stop_group(started.pid)
