"""The lease of one claimed job: its local deadline, the verdicts on it, and the news of them.

The threads that keep the lease (:mod:`.heartbeat`, :mod:`.claimwatch`) never act: they post
:class:`LeaseNews` to the main loop, which notes it here (:meth:`JobLease.note`) and decides. The
local deadline is conservative: it counts from when a request was *sent*. The server's expiry counts
from when it *received* the request, so it is never earlier than ours.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from jobagentctl.models import ClaimedJob
from jobagentctl.supervisor.outcome import StopReason

__all__ = ["Beat", "JobLease", "Lease", "LeaseNews"]

# When a job ends, how long the heartbeat thread gets to finish its request.
HEARTBEAT_JOIN_SECONDS = 1.0


class Lease:
    """The local lease deadline, on the monotonic clock. Thread-safe."""

    def __init__(self, sent_at: float, seconds: int) -> None:
        self.seconds = seconds
        self._deadline = sent_at + seconds
        self._lock = threading.Lock()
        # Told the new deadline after every renewal (the watchdog: Child.lease_holds_until).
        self.on_renew: Callable[[float], None] | None = None

    @property
    def deadline(self) -> float:
        """The moment (monotonic) the lease is known to hold until."""
        with self._lock:
            return self._deadline

    def renew(self, sent_at: float, seconds: int) -> None:
        """A heartbeat sent at ``sent_at`` succeeded and granted ``seconds``."""
        with self._lock:
            self.seconds = seconds
            # Never move the deadline back (a slow response to an older request).
            self._deadline = max(self._deadline, sent_at + seconds)
            deadline = self._deadline
        if self.on_renew is not None:
            self.on_renew(deadline)


class Beat(enum.Enum):
    """What one heartbeat (or the claim long-poll) learnt about the claim: the lease's verdicts."""

    OK = enum.auto()
    RETRY = enum.auto()  # failed in a way worth retrying: server down, 5xx, timeout, …
    LEASE_LOST = enum.auto()  # the claim is gone: reaped, released, or another attempt's
    CANCELLED = enum.auto()  # an operator cancelled the job
    JOB_GONE = enum.auto()  # the job itself is gone (deleted: 404)
    REQUEUED = enum.auto()  # an operator requeued the job while our lease held

    def __str__(self) -> str:
        """As the debug log spells it: ``lease_lost``."""
        return self.name.lower()

    @property
    def ends_claim(self) -> bool:
        """Whether the claim is gone for good (the thread that heard it stops)."""
        return self in (Beat.LEASE_LOST, Beat.CANCELLED, Beat.JOB_GONE, Beat.REQUEUED)

    @property
    def stop_reason(self) -> StopReason:
        """What the command is told when this verdict stops it. A deleted job is
        ``lease_lost`` to the command too: nothing it reports would be kept either way."""
        if self is Beat.CANCELLED:
            return StopReason.CANCELLED
        return StopReason.REQUEUED if self is Beat.REQUEUED else StopReason.LEASE_LOST


@dataclass(frozen=True)
class LeaseNews:
    """From a thread that keeps the lease: the claim of ``job_id`` is gone (``beat``), and why."""

    job_id: UUID
    beat: Beat
    why: str


# The threads' shapes as a lease uses them. The runner builds the threads, which import this
# module's words: naming their classes here would close an import circle.
class _Closable(Protocol):
    def close(self) -> None: ...


class KeepsLease(Protocol):
    """A thread that keeps a lease (``heartbeat.Heartbeater``, ``claimwatch.ClaimWatcher``)."""

    def start(self) -> None: ...

    def stop(self, timeout: float | None = 0) -> None: ...

    @property
    def running(self) -> bool: ...

    @property
    def client(self) -> _Closable: ...


class BeatsLease(KeepsLease, Protocol):
    """The heartbeat thread: it beats once on the caller's thread too, and counts its beats."""

    @property
    def beats(self) -> int: ...

    @property
    def failures(self) -> int: ...

    def beat_once(self) -> Beat: ...


class WatchesClaim(KeepsLease, Protocol):
    """The claim long-poll's thread."""


class JobLease:
    """The lease of one job as the main thread sees it, and the threads that keep it. An unleased
    claim has none: no deadline and no heartbeats."""

    def __init__(self, job: ClaimedJob, sent_at: float, received_at: float) -> None:
        self.job = job
        self.lease: Lease | None = None
        self.heartbeater: BeatsLease | None = None
        self.watcher: WatchesClaim | None = None
        self.verdict: tuple[Beat, str] | None = None
        self.lost = False
        self._claim_took = received_at - sent_at
        if job.claim_id is not None and job.lease_seconds:
            self.lease = Lease(sent_at, job.lease_seconds)

    @property
    def leased(self) -> bool:
        """Whether the claim has a lease to keep (a V1 claim has none)."""
        return self.lease is not None

    def keep(self, heartbeater: BeatsLease, watcher: WatchesClaim) -> None:
        """Start the threads that keep the lease (they are now this lease's to stop).

        Heartbeat at once first if the claim itself took more than a third of the lease. That
        happens with a long-poll and a server that granted less than asked. The claim long-poll
        brings a cancel within about a second, whatever the lease. It is not started when that
        heartbeat found the claim gone; its client is closed instead.
        """
        assert self.lease is not None
        self.heartbeater = heartbeater
        if self._claim_took > self.lease.seconds / 3:
            early = heartbeater.beat_once()
            if early.ends_claim:
                self.verdict = (early, "the claim was gone before the command started")
        heartbeater.start()
        if self.verdict is not None:
            watcher.client.close()
            return
        self.watcher = watcher
        watcher.start()

    def gone_before_start(self) -> StopReason | None:
        """Why the command must not start at all, if the claim is already gone (a verdict, or
        the local deadline past)."""
        if self.verdict is None and self.lease is not None and time.monotonic() >= self.deadline:
            self.verdict = (Beat.LEASE_LOST, "the lease ran out before the command started")
        return self.verdict[0].stop_reason if self.verdict is not None else None

    @property
    def watched(self) -> bool:
        """Whether the local deadline still matters (leased, not lost, no verdict yet)."""
        return self.lease is not None and not self.lost and self.verdict is None

    @property
    def deadline(self) -> float:
        """The local deadline (monotonic); only for a leased claim."""
        assert self.lease is not None
        return self.lease.deadline

    def note(self, news: object) -> Beat | None:
        """Record news about this job's claim; the verdict if it is news."""
        if not isinstance(news, LeaseNews):
            return None
        if news.job_id != self.job.id or self.verdict is not None:
            return None
        self.verdict = (news.beat, news.why)
        return news.beat

    def expire(self) -> None:
        """The local deadline passed with no successful heartbeat."""
        self.verdict = (Beat.LEASE_LOST, "no successful heartbeat before the local lease deadline")

    def lose(self) -> None:
        """The lease is lost: no more heartbeats, no more watching."""
        self.lost = True
        for thread in (self.heartbeater, self.watcher):
            if thread is not None:
                thread.stop()

    @property
    def why(self) -> str:
        """Why the claim is gone, as the verdict said."""
        return self.verdict[1] if self.verdict else "the lease expired"

    def close(self) -> tuple[int, int]:
        """Stop the heartbeats and the watching (the job is over); how many heartbeats
        succeeded and failed. The watcher is not waited for: its long-poll answers at once
        when the claim ends (the job's report), and the thread then closes its client."""
        if self.watcher is not None:
            self.watcher.stop()
        hb = self.heartbeater
        if hb is None:
            return 0, 0
        hb.stop(HEARTBEAT_JOIN_SECONDS)
        if not hb.running:
            hb.client.close()
        return hb.beats, hb.failures
