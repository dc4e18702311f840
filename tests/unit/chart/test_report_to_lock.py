"""images/report_to_lock.py: the step both image lock scripts share, from pip's report to hashed pins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "images" / "report_to_lock.py"
spec = importlib.util.spec_from_file_location("report_to_lock", TOOL)
assert spec is not None and spec.loader is not None
report_to_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report_to_lock)


def item(name: str, version: str, sha: str | None) -> dict:
    hashes = {"sha256": sha} if sha else {}
    return {"metadata": {"name": name, "version": version}, "download_info": {"archive_info": {"hashes": hashes}}}


def test_pins_are_normalized_hashed_and_sorted() -> None:
    report = {"install": [item("PyYAML", "6.0.4", "b" * 64), item("aiohttp_retry", "2.9.1", "a" * 64)]}
    assert report_to_lock.lock_lines(report, {}) == [
        f"aiohttp-retry==2.9.1 --hash=sha256:{'a' * 64}",
        f"pyyaml==6.0.4 --hash=sha256:{'b' * 64}",
    ]


def test_an_sdist_pin_replaces_the_local_wheels_hash() -> None:
    report = {"install": [item("antlr4_python3_runtime", "4.9.3", "f" * 64)]}
    assert report_to_lock.lock_lines(report, {"antlr4-python3-runtime": "c" * 64}) == [
        f"antlr4-python3-runtime==4.9.3 --hash=sha256:{'c' * 64}"
    ]


def test_a_package_without_a_hash_stops_the_lock() -> None:
    with pytest.raises(SystemExit, match=r"no sha256 for torch==2\.11\.0"):
        report_to_lock.lock_lines({"install": [item("torch", "2.11.0", None)]}, {})
