"""The Grafana dashboard: every query names series the operator and trainer really export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from exported_series import exported, named_in

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "charts" / "grpo-operator" / "files" / "grafana-dashboard.json"


def _panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def _exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


@pytest.mark.parametrize("expr", _exprs())
def test_every_query_names_exported_series(expr: str) -> None:
    names = named_in(expr)
    assert names, expr
    assert names <= exported(), names - exported()


@pytest.mark.parametrize("series", [
    "grpo_trainer_reward_mean", "grpo_trainer_kl_loss", "grpo_trainer_entropy", "grpo_trainer_response_length_mean",
    "grpo_trainer_throughput", "grpo_trainer_step_time_seconds", "grpo_operator_jobs",
    "grpo_operator_reconcile_total", "grpo_operator_reconcile_duration_seconds_bucket",
])
def test_dashboard_charts(series: str) -> None:
    assert any(series in expr for expr in _exprs())


def test_training_panels_are_per_job() -> None:
    for panel in _panels():
        for target in panel["targets"]:
            if "grpo_trainer_" in target["expr"]:
                assert 'grpojob=~"$grpojob"' in target["expr"] and "{{grpojob}}" in target["legendFormat"]


def test_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert "datasource" in {v["name"] for v in dashboard["templating"]["list"]}
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        mine = {(x, y) for x in xs for y in ys}
        assert not cells & mine, panel["title"]
        cells |= mine
