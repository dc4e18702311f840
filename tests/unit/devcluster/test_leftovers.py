"""grpo_devcluster.leftovers: which registered real nodes are dead, and records that cannot be read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from grpo_devcluster import leftovers


@pytest.mark.parametrize(("exists", "busy", "starter", "stale"), [
    (True, True, False, False),   # running: its processes are in its namespace
    (True, False, True, False),   # being started: namespace made, first process not yet
    (False, False, True, False),  # being started: registered, namespace not yet made
    (True, False, False, True),   # killed: the kernel kept its namespace
    (False, False, False, True),  # killed before its namespace was made: the record alone
])
def test_a_node_is_dead_when_nothing_runs_in_it_and_its_starter_is_gone(exists: bool, busy: bool, starter: bool,
                                                                        stale: bool) -> None:
    assert leftovers.is_stale(exists, busy, starter) is stale


def test_a_reused_pid_is_not_taken_for_the_starter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leftovers, "REGISTRY", tmp_path)
    leftovers.register({"netns": "grpo-node-1"})
    (_, mine), = leftovers.registrations()
    assert leftovers._starter_alive(mine)
    reused = leftovers.Registration(mine.changes, os.getpid(), "1")  # same pid, another start time
    assert not leftovers._starter_alive(reused)


def test_a_record_cut_short_by_a_kill_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leftovers, "REGISTRY", tmp_path)
    (tmp_path / "grpo-node-2.json").write_text('{"changes": {"netns": "grpo-no')
    (tmp_path / "grpo-node-3.json").write_text(json.dumps({"changes": {"netns": "grpo-node-3"}, "starter_pid": 1,
                                                           "starter_started": "5"}))
    assert [r.netns for _, r in leftovers.registrations()] == ["grpo-node-3"]
    assert not (tmp_path / "grpo-node-2.json").exists()
    leftovers.unregister("grpo-node-3")
    assert leftovers.registrations() == []
