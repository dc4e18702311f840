"""docs/api.md: generated from the CRD, in sync, every field documented and every link landing."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_operator.apidoc import anchor, objects, render
from grpo_operator.crd import build_crd

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def test_committed_api_md_matches_the_crd() -> None:
    assert API_MD.read_text() == render(), "docs/api.md is stale: run `python -m grpo_operator.apidoc > docs/api.md`"


def test_every_field_of_the_spec_and_status_has_a_row() -> None:
    text = render()
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for root in ("spec", "status"):
        for path, node in objects(schema[root], root):
            assert f"\n## {path}\n" in text, path
            for field in node["properties"]:
                assert f"| `{field}`" in text.split(f"\n## {path}\n", 1)[1].split("\n## ", 1)[0], f"{path}.{field}"


def test_every_link_lands_on_a_section() -> None:
    text = render()
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    anchors = {anchor(h) for h in re.findall(r"^## (.+)$", text, flags=re.MULTILINE)}
    assert targets and targets <= anchors, targets - anchors


def test_the_rules_users_meet_are_in_the_reference() -> None:
    text = render()
    assert "checkpoints.resumeFrom needs exactly one of jobName" in text
    assert "ReadWriteOncePod lets one pod mount the claim" in text
    assert "&lt;namespace&gt;/&lt;name&gt;/" in text  # placeholders survive Markdown
