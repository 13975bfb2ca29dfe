"""One claimed job's lease as the main thread sees it: the local deadline, the heartbeat
thread, the claim long-poll thread, and the verdict once the claim is gone.

The threads never act: they post :class:`LeaseNews` to the main loop, which notes it here
(:meth:`JobLease.note`) and decides. The watching phase reads only this interface.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from jobagentctl.models import ClaimedJob
from jobagentctl.supervisor.claimwatch import ClaimWatcher
from jobagentctl.supervisor.heartbeat import Beat, Heartbeater, Lease
from jobagentctl.supervisor.protocol import SupervisorClient

__all__ = ["JobLease", "LeaseNews"]

# When a job ends, how long the heartbeat thread gets to finish its request.
HEARTBEAT_JOIN_SECONDS = 1.0


@dataclass(frozen=True)
class LeaseNews:
    """From the heartbeat (or claim long-poll) thread: the claim of ``job_id`` is gone
    (``beat``), and why."""

    job_id: UUID
    beat: Beat
    why: str


class JobLease:
    """The lease of one job (or its absence: an unleased claim has no deadline, no beats)."""

    def __init__(self, job: ClaimedJob, sent_at: float, received_at: float) -> None:
        self.job = job
        self.lease: Lease | None = None
        self.heartbeater: Heartbeater | None = None
        self.watcher: ClaimWatcher | None = None
        self.verdict: tuple[Beat, str] | None = None
        self.lost = False
        self._sent_at = sent_at
        self._received_at = received_at
        if job.claim_id is not None and job.lease_seconds:
            self.lease = Lease(sent_at, job.lease_seconds)

    @property
    def leased(self) -> bool:
        return self.lease is not None

    def start_heartbeats(
        self,
        client: SupervisorClient,
        *,
        post: Callable[[object], None],
        warn: Callable[[str], None],
        debug: Callable[[str], None],
        rng: random.Random,
        watch_client: SupervisorClient | None = None,
    ) -> None:
        """Start the heartbeat thread; heartbeat at once first if the claim itself took more
        than a third of the lease (a long-poll, and a server that granted less than asked).

        With ``watch_client`` (which the watcher then owns and closes), also the claim
        long-poll thread, so a cancel reaches the command within about a second whatever the
        lease (:mod:`jobagentctl.supervisor.claimwatch`)."""
        job, lease = self.job, self.lease
        assert lease is not None and job.claim_id is not None and job.lease_seconds
        job_id = job.id
        self.heartbeater = Heartbeater(
            client,
            job_id,
            job.claim_id,
            lease,
            on_verdict=lambda beat, why: post(LeaseNews(job_id, beat, why)),
            log=warn,
            debug=debug,
            rng=rng,
        )
        if self._received_at - self._sent_at > job.lease_seconds / 3:
            early = self.heartbeater.beat_once()
            if early in (Beat.LEASE_LOST, Beat.CANCELLED, Beat.JOB_GONE):
                self.verdict = (early, "the claim was gone before the command started")
        self.heartbeater.start()
        if watch_client is None:
            return
        if self.verdict is not None:
            watch_client.close()
            return
        self.watcher = ClaimWatcher(
            watch_client,
            job_id,
            job.claim_id,
            confirm=self.heartbeater.beat_once,
            on_verdict=lambda beat, why: post(LeaseNews(job_id, beat, why)),
            log=warn,
            debug=debug,
            rng=rng,
        )
        self.watcher.start()

    def gone_before_start(self) -> Beat | None:
        """Whether the claim is already gone (verdict, or local deadline past): the command
        must then not start at all."""
        if self.verdict is not None:
            return self.verdict[0]
        if self.lease is not None and time.monotonic() >= self.lease.deadline:
            self.verdict = (Beat.LEASE_LOST, "the lease ran out before the command started")
            return Beat.LEASE_LOST
        return None

    @property
    def watched(self) -> bool:
        """Whether the local deadline still matters (leased, not lost, no verdict yet)."""
        return self.lease is not None and not self.lost and self.verdict is None

    @property
    def deadline(self) -> float:
        assert self.lease is not None
        return self.lease.deadline

    def note(self, news: object) -> Beat | None:
        """Record heartbeat news about this job; the verdict if it is news."""
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
        if self.heartbeater is not None:
            self.heartbeater.stop(0)
        if self.watcher is not None:
            self.watcher.stop()

    @property
    def why(self) -> str:
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
