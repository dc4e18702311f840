"""grpo-operator's `helm test`: is the installed operator running, the chart's version, and able to work?

  python -m grpo_operator.selftest --metrics-url http://<release>-metrics.<ns>.svc:8080/metrics --version 0.1.0

Run by the chart's test hook (templates/tests/install-check.yaml) in the operator's image, with no
Kubernetes credentials: everything it needs is on the operator's /metrics. It passes when the operator
answers (within --wait seconds: it may have just started), reports the chart's version, and has not
found the installed KubeRay unusable (grpo_operator_kuberay_compatible 0: every GRPOJob would be
refused). Exit 0 and "ok", or 1 and one line per problem with its fix.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families


def problems(metrics_text: str, version: str) -> list[str]:
    """What is wrong with an operator whose /metrics answered `metrics_text` (pure)."""
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
    }
    found: list[str] = []
    versions = sorted({dict(labels).get("version", "") for name, labels in samples
                       if name == "grpo_operator_build_info"})
    if not versions:
        found.append("no grpo_operator_build_info: this is not grpo-operator's /metrics (check --metrics-url)")
    elif version not in versions:
        found.append(f"the operator runs version {', '.join(versions)}, the chart installs {version}: "
                     "its pod still runs the old image (kubectl rollout status deploy/<release>-grpo-operator)")
    if samples.get(("grpo_operator_kuberay_compatible", ())) == 0:
        found.append("the operator found the installed KubeRay unusable (grpo_operator_kuberay_compatible 0): every "
                     "GRPOJob is refused; its log names the KubeRay version needed (kubectl logs "
                     "deploy/<release>-grpo-operator)")
    return found


def fetch(url: str, wait_seconds: float, sleep: Callable[[float], None] = time.sleep) -> str:
    """The body at `url`, retried until `wait_seconds` passed; raises the last error after that."""
    deadline = time.monotonic() + wait_seconds
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while True:
        try:
            with opener.open(url, timeout=5) as response:
                return response.read().decode()
        except (urllib.error.URLError, OSError):
            if time.monotonic() >= deadline:
                raise
            sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-operator-selftest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metrics-url", required=True)
    parser.add_argument("--version", required=True, help="the version the chart installs (its appVersion)")
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for the operator to answer")
    args = parser.parse_args(argv)
    try:
        text = fetch(args.metrics_url, args.wait)
    except (urllib.error.URLError, OSError) as exc:
        print(f"the operator does not answer at {args.metrics_url}: {exc}; is its pod running "
              "(kubectl get pods -l app.kubernetes.io/name=grpo-operator)?")
        return 1
    found = problems(text, args.version)
    for line in found:
        print(line)
    if not found:
        print(f"ok: grpo-operator {args.version} answers at {args.metrics_url}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
