"""tests/gpu: the GPU smoke run (marked gpu, deselected by default) and CPU tests of its helpers."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for helper_dir in (ROOT / "bench" / "gpu", ROOT / "images" / "trainer"):
    if str(helper_dir) not in sys.path:
        sys.path.insert(0, str(helper_dir))
