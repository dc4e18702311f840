"""Leader election's decisions (pure) and the health endpoints that say who leads."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp.test_utils import TestClient, TestServer
from grpo_operator import health, leader, runner
from grpo_operator.leader import LeaseView, Move, Timing, lease_body, lease_view, next_move, released_body

NOW = datetime(2026, 12, 5, 12, 0, 0, 123456, tzinfo=UTC)
TIMING = Timing(lease_duration=15, renew_deadline=10, retry_period=2)


def view(holder: str, renewed_ago: float | None = 1.0, transitions: int = 3) -> LeaseView:
    renewed = None if renewed_ago is None else NOW - timedelta(seconds=renewed_ago)
    return LeaseView(holder, renewed, 15.0, transitions, "41", acquired=NOW - timedelta(minutes=5))


def test_the_holder_renews_and_a_valid_lease_of_another_is_waited_for() -> None:
    assert next_move(view("pod-a"), "pod-a", unchanged_for=100.0) is Move.RENEW
    assert next_move(view("pod-a"), "pod-b", unchanged_for=14.9) is Move.WAIT


def test_an_expired_or_given_up_lease_is_taken() -> None:
    assert next_move(view("pod-a"), "pod-b", unchanged_for=15.0) is Move.TAKE
    assert next_move(view(""), "pod-b", unchanged_for=0.0) is Move.TAKE  # released by a leader that stopped cleanly


def test_expiry_is_judged_by_the_followers_own_observation_not_the_holders_clock() -> None:
    # A renewTime an hour old by this replica's wall clock (a skewed clock on either side) is no reason to take
    # the lease: only a record this replica has watched stay unchanged for the lease's duration is.
    stale_looking = view("pod-a", renewed_ago=3600)
    assert next_move(stale_looking, "pod-b", unchanged_for=1.0) is Move.WAIT
    assert next_move(stale_looking, "pod-b", unchanged_for=15.0) is Move.TAKE


def test_taking_counts_a_transition_and_writes_the_version_it_read() -> None:
    body = lease_body("grpo", "grpo-system", "pod-b", NOW, TIMING, view("pod-a", renewed_ago=20))
    assert body["metadata"] == {"name": "grpo", "namespace": "grpo-system", "resourceVersion": "41"}
    spec = body["spec"]
    assert spec["holderIdentity"] == "pod-b"
    assert spec["leaseTransitions"] == 4
    assert spec["acquireTime"] == spec["renewTime"] == "2026-12-05T12:00:00.123456Z"
    assert spec["leaseDurationSeconds"] == 15


def test_renewing_keeps_the_acquire_time_and_the_transitions() -> None:
    previous = view("pod-a")
    spec = lease_body("grpo", "grpo-system", "pod-a", NOW, TIMING, previous)["spec"]
    assert spec["leaseTransitions"] == 3
    assert spec["acquireTime"] == leader.format_time(previous.acquired)  # type: ignore[arg-type]
    assert spec["renewTime"] == "2026-12-05T12:00:00.123456Z"


def test_a_new_lease_has_no_resource_version_and_no_transitions() -> None:
    body = lease_body("grpo", "grpo-system", "pod-a", NOW, TIMING, None)
    assert "resourceVersion" not in body["metadata"]
    assert body["spec"]["leaseTransitions"] == 0


def test_a_released_lease_names_no_holder_and_is_taken_at_once() -> None:
    released = released_body(view("pod-a"), "grpo", "grpo-system")
    assert released["spec"]["holderIdentity"] == ""
    assert released["metadata"]["resourceVersion"] == "41"
    assert next_move(lease_view(released), "pod-b", unchanged_for=0.0) is Move.TAKE


def test_a_lease_read_from_the_apiserver_is_understood() -> None:
    read = lease_view({"metadata": {"resourceVersion": "7"}, "spec": {
        "holderIdentity": "pod-a", "renewTime": "2026-12-05T11:59:59.000000Z", "leaseDurationSeconds": 15,
        "leaseTransitions": 2, "acquireTime": "2026-12-05T11:00:00.000000Z"}})
    assert read == LeaseView("pod-a", datetime(2026, 12, 5, 11, 59, 59, tzinfo=UTC), 15.0, 2, "7",
                             datetime(2026, 12, 5, 11, 0, tzinfo=UTC))
    assert next_move(read, "pod-b", unchanged_for=0.0) is Move.WAIT


@pytest.mark.parametrize(("lease", "renew", "retry"), [(10, 10, 2), (15, 10, 10), (15, 10, 0)])
def test_timings_that_could_let_two_leaders_overlap_are_refused(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retryPeriod < renewDeadline < leaseDuration"):
        Timing(lease, renew, retry)


def test_a_round_gets_a_quarter_of_the_renew_deadline_so_a_stuck_one_leaves_room_for_more() -> None:
    assert Timing(40, 12, 3.5).attempt == 3.5  # never less than the period between rounds
    assert Timing(4, 3, 1).attempt == leader.MIN_ATTEMPT_SECONDS  # nor than a slow apiserver may take
    defaults = Timing(30, 20, 2)  # the chart's
    assert defaults.attempt == 5.0
    # keep(): a period's sleep, then rounds of at most `attempt` a period apart, until the deadline.
    starts = [defaults.retry_period + k * (defaults.attempt + defaults.retry_period) for k in range(5)]
    whole_rounds = [start for start in starts if start + defaults.attempt <= defaults.renew_deadline]
    assert len(whole_rounds) == 2 and starts[2] < defaults.renew_deadline  # and a third, cut short


def test_a_failed_round_says_what_it_met_and_a_timeout_how_long_it_waited() -> None:
    assert leader.failure(TimeoutError(), 5.0) == "no answer within 5.0 s"
    assert leader.failure(ConnectionResetError("reset by peer"), 5.0) == "ConnectionResetError: reset by peer"


def test_a_pod_is_named_by_its_pod_id_and_a_local_run_by_a_unique_name() -> None:
    assert runner.identity({"POD_ID": "grpo-operator-7f9c-abcde"}) == "grpo-operator-7f9c-abcde"
    assert runner.identity({}) != runner.identity({})


async def _answers(state: health.Health) -> dict[str, tuple[int, dict]]:
    async with TestClient(TestServer(health.application(state))) as client:
        out = {}
        for path in ("/healthz", "/readyz"):
            response = await client.get(path)
            out[path] = (response.status, json.loads(await response.text()))
        return out


def test_a_follower_is_alive_and_ready_to_take_over_and_names_the_leader() -> None:
    state = health.Health(leader.Leadership("pod-b", leading=False, holder="pod-a"))
    answers = asyncio.run(_answers(state))
    assert answers["/healthz"][0] == answers["/readyz"][0] == 200
    assert answers["/readyz"][1] == {"identity": "pod-b", "leading": False, "leader": "pod-a",
                                     "reconciling": False, "problems": []}


def test_a_leader_is_ready_once_kopf_runs_and_dead_once_it_stopped() -> None:
    state = health.Health(leader.Leadership("pod-a", leading=True, holder="pod-a"))
    starting = asyncio.run(_answers(state))
    assert starting["/readyz"][0] == 503 and starting["/healthz"][0] == 503
    state.kopf_running = True
    running = asyncio.run(_answers(state))
    assert running["/readyz"][0] == running["/healthz"][0] == 200
    assert running["/readyz"][1]["reconciling"] is True


def test_a_start_up_problem_fails_readiness_on_every_replica_and_is_said() -> None:
    problem = "The installed GRPOJob CRD (grpojobs.grpo.dev) is version 0.0.9 but this operator is 0.1.0: ..."
    for leading in (True, False):
        state = health.Health(leader.Leadership("pod-a", leading=leading), kopf_running=leading,
                              problems=[problem])
        answers = asyncio.run(_answers(state))
        assert answers["/readyz"][0] == 503
        assert answers["/readyz"][1]["problems"] == [problem]
        assert answers["/healthz"][0] == 200  # a restart would not fix a stale CRD


def test_the_health_address_comes_from_a_kopf_style_url() -> None:
    assert health.host_and_port("http://0.0.0.0:8081/healthz") == ("0.0.0.0", 8081)
    assert health.host_and_port("http://127.0.0.1:9000") == ("127.0.0.1", 9000)
    with pytest.raises(ValueError, match="names no port"):
        health.host_and_port("http://0.0.0.0")
