"""bench/fit/measure.py runs end to end (CPU, a tiny shape) before any GPU time is spent on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MEASURE = Path(__file__).resolve().parents[3] / "bench" / "fit" / "measure.py"


@pytest.mark.slow
def test_smoke_run_writes_every_phase_and_counts_the_states_as_predicted(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    # Its own process: it initialises torch.distributed.
    done = subprocess.run([sys.executable, str(MEASURE), "--smoke", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["command"].startswith("measure.py --smoke")
    rows = {(r["micro_batch"], r["phase"]): r for r in result["rows"]}
    for micro in (1, 2):
        for phase in ("actor.update", "actor.log_prob", "ref.log_prob"):
            assert rows[(micro, phase)]["predicted_bytes"] > 0
        states = rows[(micro, "actor.states")]
        # Weights and AdamW moments of the FSDP flat parameters, exactly (AdamW adds a step counter each).
        assert abs(states["error_pct"]) < 0.01, states
    assert rows[(2, "actor.update")]["predicted_bytes"] > rows[(1, "actor.update")]["predicted_bytes"]
    assert rows[(0, "rollout")]["measured_bytes"] is None  # no vLLM on a CPU
