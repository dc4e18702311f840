"""The operator's own child watch (runtime/watch.py, runtime/lines.py): its pure parts. Its behaviour against a
real apiserver (relist, 410, deletions while down) is tests/e2e/test_child_watch.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from grpo_operator.runtime.kube import ApiError
from grpo_operator.runtime.lines import lines_of, split_lines
from grpo_operator.runtime.watch import ChildWatch, WatchExpired, stub_of, vanished, watch_event


def test_lines_split_across_chunks_are_joined_and_blank_lines_dropped() -> None:
    assert split_lines(b"", b'{"a":1}\n{"b"') == ([b'{"a":1}'], b'{"b"')
    assert split_lines(b'{"b"', b':2}\n\n') == ([b'{"b":2}'], b"")


def test_a_line_longer_than_aiohttps_readline_limit_arrives_whole() -> None:
    event = json.dumps({"type": "MODIFIED", "object": {"data": "x" * 200_000}}).encode()

    async def chunks():
        body = event + b"\n" + event  # the last line has no newline: the server closed after it
        for start in range(0, len(body), 4096):
            yield body[start:start + 4096]

    async def collect() -> list[bytes]:
        return [line async for line in lines_of(chunks())]

    assert asyncio.run(collect()) == [event, event]


def test_a_410_error_event_means_list_again_and_other_errors_are_api_errors() -> None:
    gone = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})
    with pytest.raises(WatchExpired, match="too old"):
        watch_event(gone.encode())
    forbidden = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 403, "reason": "Forbidden"}})
    with pytest.raises(ApiError) as raised:
        watch_event(forbidden.encode())
    assert raised.value.status == 403


def test_an_event_is_its_type_and_object() -> None:
    line = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()
    assert watch_event(line) == ("ADDED", {"metadata": {"name": "a"}})


def test_objects_a_relist_no_longer_finds_are_the_ones_deleted_meanwhile() -> None:
    known = {("ns", "a"): {}, ("ns", "b"): {}, ("other", "a"): {}}
    assert vanished(known, [("ns", "a"), ("ns", "c")]) == [("ns", "b"), ("other", "a")]


def test_the_stub_kept_between_events_holds_what_a_deleted_childs_handler_reads() -> None:
    rayjob = {"metadata": {"namespace": "ns", "name": "j-train", "labels": {"grpo.dev/job": "j"},
                           "managedFields": [{"big": 1}], "resourceVersion": "5"},
              "spec": {"entrypoint": "x"}, "status": {"jobStatus": "RUNNING"}}
    assert stub_of(rayjob) == {"metadata": {"namespace": "ns", "name": "j-train", "labels": {"grpo.dev/job": "j"}}}


class _ScriptedWatch(ChildWatch):
    """The watch's loop with each list and watch request replaced by the next scripted outcome."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        super().__init__(client=None, path="/p", label_selector="l", on_event=lambda kind, obj: None,  # type: ignore[arg-type]
                         backoffs=(0,))
        self.outcomes, self.calls = outcomes, []

    async def _next(self, call: str) -> None:
        self.calls.append(call)
        outcome = self.outcomes.pop(0) if self.outcomes else asyncio.CancelledError()
        if outcome is not None:
            raise outcome

    async def relist(self) -> None:
        await self._next("list")
        self.resource_version = "10"

    async def watch_once(self) -> None:
        await self._next(f"watch@{self.resource_version}")
        self.resource_version = "20"


def test_a_gone_resource_version_lists_again_and_other_failures_resume_where_the_watch_was() -> None:
    gone = ApiError(410, "Expired", "too old")
    watch = _ScriptedWatch([None, None, WatchExpired("too old"), None, gone, gone, None,
                            ApiError(500, "", "etcd"), TimeoutError(), ValueError("not JSON")])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(watch.run_forever())
    assert watch.calls == ["list", "watch@10", "watch@20",  # the server ended a watch: resume from the newest
                           "list", "watch@10",  # 410 as an ERROR event: list again
                           "list",  # 410 answered to a watch request: list again
                           "list",  # 410 answered to a list's continue token: list again from the start
                           "watch@10", "watch@10", "watch@10",  # other errors: resume where it was, after a pause
                           "watch@10"]


def test_a_missing_crd_lists_again_when_it_is_back() -> None:
    watch = _ScriptedWatch([None, ApiError(404, "NotFound", "no rayjobs")])
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(watch.run_forever())
    assert watch.calls == ["list", "watch@10", "list"]
