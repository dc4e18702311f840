"""The user docs: every link to a section lands, and the stated NVIDIA driver floor matches the lock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grpo_operator.apidoc import anchor

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
# Markdown and code that point users at a docs section.
SOURCES = [*DOCS.glob("*.md"), ROOT / "README.md", ROOT / "charts" / "grpo-operator" / "README.md",
           *(ROOT / "operator" / "grpo_operator").rglob("*.py")]
LINK = re.compile(r"(?:docs/)?([a-z-]+\.md)#([a-z0-9_-]+)")
# NVIDIA's minimum driver per CUDA major version under minor version compatibility
# (docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
DRIVER_FLOOR = {13: 580, 12: 525}


def _sections(page: Path) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#+\s+(.+?)\s*$", page.read_text(), flags=re.MULTILINE)}


def _links() -> list[tuple[str, str, str]]:
    found = []
    for source in SOURCES:
        for page, section in LINK.findall(source.read_text()):
            if (DOCS / page).is_file():
                found.append((source.relative_to(ROOT).as_posix(), page, section))
    return found


@pytest.mark.parametrize(("source", "page", "section"), _links())
def test_links_to_doc_sections_land(source: str, page: str, section: str) -> None:
    assert section in _sections(DOCS / page), f"{source} links to {page}#{section}, which has no such heading"


def test_there_are_links_to_check() -> None:
    pages = {page for _, page, _ in _links()}
    assert {"troubleshooting.md", "runbooks.md"} <= pages


def test_the_documented_driver_floor_is_the_one_the_locked_cuda_needs() -> None:
    lock = (ROOT / "images" / "trainer" / "requirements.lock").read_text()
    (runtime,) = re.findall(r"^nvidia-cuda-runtime==(\d+)\.", lock, flags=re.MULTILINE)
    floor = DRIVER_FLOOR[int(runtime)]
    for doc in (DOCS / "troubleshooting.md", ROOT / "README.md"):
        assert f">= {floor}" in doc.read_text(), f"{doc.name} does not state the NVIDIA driver floor >= {floor}"
