"""The verdict's JSON survives Kubernetes' 4096-byte termination message: text is cut, structure never."""

from __future__ import annotations

import json

from grpo_trainer.preflight.verdict import TERMINATION_MESSAGE_LIMIT, Check, Verdict, write_termination_message


def _verdict(checks: int, text: int) -> Verdict:
    rows = [Check(f"check.{i}", f"spec.field{i}", i != 3, "m" * text, "v" * text, "f" * text) for i in range(checks)]
    return Verdict(tuple(rows))


def test_short_verdict_is_kept_whole() -> None:
    verdict = _verdict(3, 20)
    assert json.loads(verdict.to_json(TERMINATION_MESSAGE_LIMIT)) == verdict.to_dict()


def test_long_text_is_cut_passed_checks_first_and_every_check_and_key_stays() -> None:
    verdict = _verdict(12, 2000)
    text = verdict.to_json(TERMINATION_MESSAGE_LIMIT)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    data = json.loads(text)
    assert data["passed"] is False and [c["name"] for c in data["checks"]] == [c.name for c in verdict.checks]
    assert all(set(c) == {"name", "field", "ok", "message", "value", "fix"} for c in data["checks"])
    failed = data["checks"][3]
    passed = data["checks"][0]
    assert failed["field"] == "spec.field3" and failed["ok"] is False
    assert len(failed["message"]) > len(passed["message"])


def test_more_checks_than_fit_keep_the_failures_and_count_the_rest() -> None:
    rows = [Check(f"data.file:part-{i:03}.jsonl", "spec.data.trainFiles", i % 2 == 0, "x" * 300) for i in range(128)]
    text = Verdict(tuple(rows)).to_json(TERMINATION_MESSAGE_LIMIT)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    data = json.loads(text)
    names = [c["name"] for c in data["checks"]]
    assert data["passed"] is False and names[0] == "data.file:part-001.jsonl"
    assert names[-2:] == ["more", "passed"] and data["checks"][-1]["message"] == "64 checks passed"
    kept = len(names) - 2
    assert data["checks"][-2]["message"] == f"{64 - kept} more failed checks"


def test_round_trip_through_the_termination_log(tmp_path) -> None:
    verdict = _verdict(4, 10)
    path = tmp_path / "termination-log"
    write_termination_message(verdict, str(path))
    assert Verdict.from_dict(json.loads(path.read_text())) == verdict


def test_the_chosen_checkpoint_claim_size_survives_any_cut_and_leads_with_passed() -> None:
    rows = [Check(f"data.file:part-{i:03}.jsonl", "spec.data.trainFiles", True, "x" * 300) for i in range(128)]
    verdict = Verdict(tuple(rows), checkpoint_claim_bytes=375 * 2**30)
    text = verdict.to_json(TERMINATION_MESSAGE_LIMIT)
    assert text.startswith('{"passed":true,')  # what the devcluster's KWOK reads to end a preflight pod
    assert Verdict.from_dict(json.loads(text)).checkpoint_claim_bytes == 375 * 2**30
    assert "checkpointClaimBytes" not in Verdict(tuple(rows[:2])).to_dict()
