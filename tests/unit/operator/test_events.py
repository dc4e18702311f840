"""The Events the operator posts itself (runtime/events.py): what `kubectl describe grpojob` shows."""

from __future__ import annotations

from datetime import UTC, datetime

from grpo_operator.runtime.events import MESSAGE_LIMIT, event_body

JOB = {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPOJob",
       "metadata": {"name": "tiny", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"}}


def test_an_event_names_the_grpojob_it_is_about_so_describe_lists_it() -> None:
    body = event_body(JOB, "Warning", "AppFailed", "vLLM died", datetime(2026, 12, 5, 18, 0, tzinfo=UTC))
    assert body["metadata"] == {"generateName": "tiny.", "namespace": "team-a"}
    assert body["involvedObject"] == {"apiVersion": "grpo.dev/v1alpha1", "kind": "GRPOJob", "name": "tiny",
                                      "namespace": "team-a", "uid": "u-1"}
    assert (body["type"], body["reason"], body["message"]) == ("Warning", "AppFailed", "vLLM died")
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-12-05T18:00:00Z"
    assert body["source"] == {"component": "grpo-operator"} and body["count"] == 1


def test_a_long_message_is_cut_to_what_describe_shows_and_says_so() -> None:
    body = event_body(JOB, "Warning", "PreflightFailed", "x" * 5000, datetime.now(UTC))
    assert len(body["message"]) == MESSAGE_LIMIT and body["message"].endswith("...")
