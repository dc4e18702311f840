"""tests/gpu: the GPU runs (marked gpu, deselected by default) and CPU tests of their helpers.

The `gpu` tests share one batch of runs (`gpu_batch`): learning and control, placement with a reward
model, and the smoke run, all at the same time on the one GPU (bench/gpu/session.py says why they may).
GRPO_GPU_WORK names the work folder (default: a temporary one), GRPO_GPU_OUT a folder that keeps every
run's result JSON, gzipped log and steps file; GRPO_GPU_STEPS (10) and GRPO_GPU_LEARN_STEPS (30) the steps,
GRPO_GPU_CAP_S (370) the seconds after which each run is stopped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
for helper_dir in (ROOT / "bench" / "gpu", ROOT / "images" / "trainer"):
    if str(helper_dir) not in sys.path:
        sys.path.insert(0, str(helper_dir))


@pytest.fixture(scope="session")
def gpu_batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The unmeasured batch's outcomes by run name (session.Outcome: result, error, placement check)."""
    import run_grpo
    import session

    work = Path(os.environ.get("GRPO_GPU_WORK") or tmp_path_factory.mktemp("grpo-gpu"))
    out = Path(os.environ["GRPO_GPU_OUT"]) if os.environ.get("GRPO_GPU_OUT") else None
    batch = session.unmeasured_batch(
        learn_steps=int(os.environ.get("GRPO_GPU_LEARN_STEPS", "30")),
        smoke_steps=int(os.environ.get("GRPO_GPU_STEPS", "10")),
        cap_s=float(os.environ.get("GRPO_GPU_CAP_S", "370")),
    )
    outcomes = session.run_batch(batch, run_grpo.Paths(work), out)
    for o in outcomes.values():
        if o.result is not None:
            run_grpo.print_result(o.result)
    return outcomes
