"""Leader election on a coordination.k8s.io Lease: of the operator's replicas only the leader reconciles.

The replicas race for one Lease in the operator's namespace, as client-go's leaderelection does: the holder
renews it every ``retry_period``; a replica that sees it unrenewed for ``lease_duration`` takes it. Each write
carries the resourceVersion it read, so of two replicas taking an expired lease at once the apiserver lets one
win (409 for the other). The leader that cannot renew for ``renew_deadline`` (shorter than the lease, so it
stops before anyone may take over) stops reconciling and exits; its pod restarts as a follower. A leader that
stops on purpose (SIGTERM: a rollout, a drained node, a deleted pod) gives the lease up, so a follower takes
over at its next try instead of after the lease expires.

Each round is one try with a bound of its own (`Timing.attempt`), on a client of its own that does not retry
inside a round: the rounds are the retries. A request stuck on a connection that stopped answering, or a
retry's backoff inside the client, would otherwise hold the one round in flight until the renew deadline and
the leader would step down although the apiserver answered a new connection at once.

Followers run no kopf at all: no watches, no caches. Taking over is a cold start of kopf, which lists every
GRPOJob and resumes each from its status and children (the handlers are idempotent: create-if-absent).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from grpo_operator.runtime import kube

log = logging.getLogger("grpo_operator.leader")

LEASES = kube.RESOURCES["Lease"]
# A round's read and write take milliseconds; an apiserver under a burst's load may take a second or more, and a
# round cut shorter than this would make a leader step down over a slow answer rather than a stuck one.
MIN_ATTEMPT_SECONDS = 2.0
# Giving the lease up has no later rounds to retry it (the process is stopping): it tries again after this pause,
# bounded tries, until the renew deadline has passed.
RELEASE_PAUSE_SECONDS = 0.2
# What a round (or a try at giving the lease up) may meet and survive: an answer refused, or none in time.
ROUND_ERRORS = (kube.ApiError, *kube.TRANSIENT_ERRORS)  # asyncio.TimeoutError is among the transient ones


@dataclass(frozen=True)
class Timing:
    """The lease outlives the renew deadline, so a leader that lost its lease has stopped before another may
    take it. The defaults are OperatorSettings' (twice client-go's 15/10 s; settings.py says why)."""

    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"leader election needs retryPeriod < renewDeadline < leaseDuration, got {self.retry_period} s, "
                f"{self.renew_deadline} s, {self.lease_duration} s"
            )

    @property
    def attempt(self) -> float:
        """How long one round may take: a quarter of the renew deadline (5 s of the default 20), and at least a
        retry period and MIN_ATTEMPT_SECONDS. With the defaults a round stuck for its whole bound leaves the deadline
        room for one more whole round and one cut short, each on a new connection."""
        return max(self.retry_period, self.renew_deadline / 4, MIN_ATTEMPT_SECONDS)


def election_client(login: kube.Login, timing: Timing) -> kube.Client:
    """The elector's own client: one attempt per request (a round that fails is retried by the next round), and
    connections kept for longer than a retry period, so that renewing is one request on an open connection
    instead of a TLS handshake every round."""
    return kube.Client(login, max_connections=2, retry=kube.RetryPolicy(attempts=1),
                       keepalive=timing.retry_period + timing.attempt)


def failure(exc: BaseException, timeout: float) -> str:
    """What a failed round met, for the log: a timeout says nothing by itself."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:.1f} s"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class LeaseView:
    """What a Lease says, as of its read."""

    holder: str
    renewed: datetime | None
    duration: float
    transitions: int
    resource_version: str | None
    acquired: datetime | None = None


class Move(Enum):
    RENEW = "renew"  # ours: renew it
    TAKE = "take"  # free or expired: take it
    WAIT = "wait"  # another's, still valid


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(moment: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_view(lease: Mapping[str, Any]) -> LeaseView:
    spec = lease.get("spec") or {}
    return LeaseView(
        holder=spec.get("holderIdentity") or "",
        renewed=parse_time(spec.get("renewTime")),
        duration=float(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
        acquired=parse_time(spec.get("acquireTime")),
    )


def next_move(view: LeaseView, me: str, unchanged_for: float) -> Move:
    """What `me` does with the lease it just read, `unchanged_for` seconds (on its own clock) after it first saw
    this very record (holder, renewal, version). Expiry is judged by this replica's own observation, as client-go
    does, never by comparing its wall clock with the holder's renewTime: a skewed clock must not let a follower
    take a lease that is being renewed. An empty holder is a lease given up."""
    if view.holder == me:
        return Move.RENEW
    if not view.holder:
        return Move.TAKE
    return Move.TAKE if unchanged_for >= view.duration else Move.WAIT


def lease_body(name: str, namespace: str, me: str, now: datetime, timing: Timing,
               previous: LeaseView | None) -> dict[str, Any]:
    """The Lease `me` writes to take or renew it; `previous` is the one it read (None: it creates it)."""
    renewing = previous is not None and previous.holder == me
    acquired = previous.acquired if renewing and previous.acquired else now
    transitions = 0 if previous is None else previous.transitions + (0 if renewing else 1)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if previous is not None and previous.resource_version:
        metadata["resourceVersion"] = previous.resource_version  # the apiserver refuses a stale write (409)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": me,
            "leaseDurationSeconds": max(1, round(timing.lease_duration)),
            "acquireTime": format_time(acquired),
            "renewTime": format_time(now),
            "leaseTransitions": transitions,
        },
    }


def released_body(view: LeaseView, name: str, namespace: str) -> dict[str, Any]:
    """The lease given up: no holder, so the next follower to read it takes it at once."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if view.resource_version:
        metadata["resourceVersion"] = view.resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": view.transitions},
    }


@dataclass
class Leadership:
    """What readiness and the metrics say: whether this replica leads, and who does."""

    identity: str
    leading: bool = False
    holder: str = ""


class LeaderElector:
    """Takes the Lease, keeps it, gives it up; never acts on GRPOJobs itself."""

    def __init__(self, client: kube.Client, namespace: str, name: str, identity: str, timing: Timing,
                 clock: Any = None) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name
        self._timing = timing
        self._clock = clock or (lambda: datetime.now(UTC))
        self.state = Leadership(identity)
        # The lease record last read and when (monotonic) this replica first saw it: its age decides expiry.
        self._seen: tuple[tuple[str, datetime | None, str | None], float] | None = None

    async def _read(self) -> LeaseView | None:
        with kube.call_site("leader-election"):
            lease = await kube.get("Lease", self._namespace, self._name, self._client)
        return None if lease is None else lease_view(lease)

    def _unchanged_for(self, view: LeaseView) -> float:
        now = asyncio.get_running_loop().time()
        record = (view.holder, view.renewed, view.resource_version)
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, now)
        return now - self._seen[1]

    async def _write(self, view: LeaseView | None, body: dict[str, Any]) -> None:
        with kube.call_site("leader-election"):
            if view is None:
                await self._client.request("POST", LEASES.path(self._namespace), body, answer=False)
            else:
                await self._client.request("PUT", LEASES.path(self._namespace, self._name), body, answer=False)

    async def try_once(self) -> bool:
        """One round: read the lease and take or renew it if this replica may. True if it leads now."""
        me = self.state.identity
        view = await self._read()
        if view is not None:
            self.state.holder = view.holder
            if next_move(view, me, self._unchanged_for(view)) is Move.WAIT:
                self.state.leading = False
                return False
        now = self._clock()
        body = lease_body(self._name, self._namespace, me, now, self._timing, view)
        try:
            await self._write(view, body)
        except kube.ApiError as exc:
            if exc.status != 409:
                raise
            # Another replica wrote first, or a write of ours moved the version since our read: this one applied
            # although its answer was lost, or an earlier round's, cut by its bound, that landed late. Only the
            # lease itself can tell.
            again = await self._read()
            if again is not None and again.holder == me:
                if again.renewed == parse_time(body["spec"]["renewTime"]):
                    return self._leads(view)
                raise  # our own earlier write: not lost; the next round renews on the version it reads
            self.state.leading = False
            self.state.holder = again.holder if again is not None else ""
            return False
        return self._leads(view)

    def _leads(self, view: LeaseView | None) -> bool:
        me = self.state.identity
        if not self.state.leading:
            log.info("%s leads now (lease %s/%s, held before by %s)", me, self._namespace, self._name,
                     (view.holder if view else "") or "nobody")
        self.state.leading, self.state.holder = True, me
        return True

    async def acquire(self) -> float:
        """Return once this replica leads: the (monotonic) start of the round that took the lease."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                if await asyncio.wait_for(self.try_once(), self._timing.attempt):
                    return started
            except ROUND_ERRORS as exc:
                log.warning("could not read or take the lease: %s", failure(exc, self._timing.attempt))
            await asyncio.sleep(self._timing.retry_period)

    async def keep(self, renewed: float) -> None:
        """Renew every retry period from `renewed` (the monotonic start of the last successful round); return when
        the lease is lost: another holds it, or no round that started within the renew deadline succeeded. A round
        counts from its start (the renewTime it writes is stamped then) and may only use what is left of the
        deadline, so the leader knows it lost before the lease can expire for anyone else: at the deadline itself,
        not a retry period after it."""
        loop = asyncio.get_running_loop()
        while True:
            left = self._timing.renew_deadline - (loop.time() - renewed)
            if left <= 0:
                break
            await asyncio.sleep(min(self._timing.retry_period, left))
            started = loop.time()
            left = self._timing.renew_deadline - (started - renewed)
            if left <= 0:
                break
            bound = min(left, self._timing.attempt)
            try:
                if await asyncio.wait_for(self.try_once(), bound):
                    renewed = started
                    continue
                log.error("lost the lease to %s", self.state.holder)
                self.state.leading = False
                return
            except ROUND_ERRORS as exc:
                log.warning("could not renew the lease: %s; %.0f s of the renew deadline left", failure(exc, bound),
                            max(0.0, self._timing.renew_deadline - (loop.time() - renewed)))
        self.state.leading = False
        log.error("no renewal of the lease for %.0f s: stepping down", self._timing.renew_deadline)

    async def close(self) -> None:
        await self._client.close()

    async def release(self) -> None:
        """Give the lease up if this replica still holds it, so a follower takes over at once."""
        if not self.state.leading:
            return
        self.state.leading = False
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._timing.renew_deadline
        while True:
            try:
                view = await asyncio.wait_for(self._read(), self._timing.attempt)
                if view is not None and view.holder == self.state.identity:
                    await asyncio.wait_for(self._write(view, released_body(view, self._name, self._namespace)),
                                           self._timing.attempt)
                    log.info("gave the lease up")
                return
            except ROUND_ERRORS as exc:
                # A 409 here is most likely the renewal cancelled as the stop began, landing after our read.
                if loop.time() + self._timing.attempt > give_up_at:
                    log.warning("could not give the lease up (a follower takes it once it expires): %s",
                                failure(exc, self._timing.attempt))
                    return
                log.info("giving the lease up: %s; trying again", failure(exc, self._timing.attempt))
                await asyncio.sleep(RELEASE_PAUSE_SECONDS)
