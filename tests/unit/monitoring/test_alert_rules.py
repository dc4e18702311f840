"""The shipped alert rules, checked and unit-tested by the real promtool (Debian package `prometheus`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from exported_series import exported, named_in

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "charts" / "grpo-operator" / "files" / "prometheus-rules.yaml"
PROMTOOL_TESTS = Path(__file__).with_name("alerts_test.yaml")
REQUIRED_ANNOTATIONS = {"summary", "description", "runbook_url"}
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: hack/bootstrap installs it (apt-get install prometheus)")
    return found


def _alerts(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def _without_annotations(rules: dict[str, Any]) -> dict[str, Any]:
    """promtool compares annotations verbatim; the tests pin expressions, `for` and labels instead."""
    return {
        "groups": [
            {**group, "rules": [{k: v for k, v in rule.items() if k != "annotations"} for rule in group["rules"]]}
            for group in rules["groups"]
        ]
    }


def test_promtool_check_rules_accepts_the_rules_file() -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    rules = yaml.safe_load(RULES.read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_without_annotations(rules)))
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    result = subprocess.run(
        [_promtool(), "test", "rules", PROMTOOL_TESTS.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _firing_and_quiet(test: dict[str, Any], alert: str) -> tuple[bool, bool]:
    """Does this promtool test expect `alert` to fire, and does it feed series that must not fire it?"""
    checks = [c for c in test["alert_rule_test"] if c["alertname"] == alert]
    fired = {tuple(sorted(e["exp_labels"].items())) for c in checks for e in c.get("exp_alerts") or []}
    firing = bool(fired)
    series = [s["series"] for s in test["input_series"]]
    jobs_fed = {s.split("grpojob=")[1].split('"')[1] for s in series if "grpojob=" in s}
    jobs_fired = {dict(labels).get("grpojob") for labels in fired}
    quiet = any(not c.get("exp_alerts") for c in checks) or bool(jobs_fed - jobs_fired)
    return firing, quiet


@pytest.mark.parametrize("alert", [a["alert"] for a in _alerts(yaml.safe_load(RULES.read_text()))])
def test_every_alert_is_tested_firing_and_quiet(alert: str) -> None:
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    results = [_firing_and_quiet(t, alert) for t in tests]
    assert any(firing for firing, _ in results), f"no promtool test expects {alert} to fire"
    assert any(quiet for _, quiet in results), f"no promtool test feeds series that must not fire {alert}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("alert", _alerts(yaml.safe_load(RULES.read_text())), ids=lambda a: a["alert"])
def test_every_alert_has_a_severity_and_a_runbook_section(alert: dict[str, Any]) -> None:
    assert alert["labels"]["severity"] in {"warning", "critical"}
    assert set(alert["annotations"]) >= REQUIRED_ANNOTATIONS
    page, _, anchor = alert["annotations"]["runbook_url"].partition("#")
    assert page == "docs/runbooks.md" and anchor == alert["alert"].lower()
    assert anchor in _anchors(RUNBOOKS.read_text()), f"docs/runbooks.md has no section #{anchor}"


def test_the_kl_rule_skips_the_trainers_baseline_steps() -> None:
    from grpo_trainer.progress.prometheus import BASELINE_STEPS

    (rule,) = [a for a in _alerts(yaml.safe_load(RULES.read_text())) if a["alert"] == "GRPOJobKLRising"]
    assert f"(grpo_trainer_step offset 30m) > {BASELINE_STEPS}" in rule["expr"]


@pytest.mark.parametrize("alert", _alerts(yaml.safe_load(RULES.read_text())), ids=lambda a: a["alert"])
def test_every_alert_reads_series_that_are_exported(alert: dict[str, Any]) -> None:
    names = named_in(alert["expr"])
    assert names and names <= exported(), names - exported()
