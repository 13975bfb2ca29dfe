"""The heartbeat thread: renews one claim's lease until stopped or told the claim is gone."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from jobagentctl.errors import ClaimLost, ClaimMismatch, JobTerminal, NotFound
from jobagentctl.models import JobStatus, heartbeat_interval, timestamps_as_sent
from jobagentctl.supervisor import retry
from jobagentctl.supervisor.lease.claimthread import ClaimThread
from jobagentctl.supervisor.lease.job_lease import Beat, Lease
from jobagentctl.supervisor.protocol import describe_error, is_transient

__all__ = ["JITTER_FLOOR", "Heartbeater", "backoff_delay"]

# A heartbeat follows the last one after this part of the interval up to all of it, at random:
# agents whose heartbeats fell together (a fleet reconnecting at once) drift apart again.
JITTER_FLOOR = 0.75
# First retry delay after a failed heartbeat; doubles per failure up to the interval.
BACKOFF_BASE = 0.25


def backoff_delay(failures: int, interval: float, rng: random.Random) -> float:
    """Delay before retry number ``failures`` (≥ 1): exponential, capped at the interval."""
    return retry.backoff_delay(failures, BACKOFF_BASE, interval, rng)


@dataclass(eq=False)
class Heartbeater(ClaimThread):
    """Heartbeats one claim from a daemon thread until stopped or told the claim is gone.

    Failures are retried with jittered exponential backoff (capped at the interval) for as long as
    the thread runs. Declaring the lease lost when the local deadline passes is the supervisor's
    decision, not this thread's. A definitive answer (409, 404) ends the loop and is posted as news
    (``Beat.LEASE_LOST``, ``Beat.CANCELLED`` or ``Beat.JOB_GONE``, and why).
    """

    kind: ClassVar[str] = "heartbeat"

    lease: Lease
    # When the command last printed (relay.LastOutput.at): each heartbeat carries it.
    last_output: Callable[[], datetime | None] = lambda: None
    beats: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    # beat_once also runs on the claim long-poll's thread (its confirmation heartbeat).
    _count: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def next_delay(self, failures_in_a_row: int) -> float:
        """The sleep before the next heartbeat: 75–100 % of the interval, or a backoff."""
        interval = heartbeat_interval(self.lease.seconds)
        if failures_in_a_row:
            return backoff_delay(failures_in_a_row, interval, self.rng)
        return interval * self.rng.uniform(JITTER_FLOOR, 1.0)

    def beat_once(self) -> Beat:
        """Send one heartbeat and account for it (counters, lease, log, verdict). Thread-safe:
        the claim long-poll's thread calls it too, to confirm that a claim ended."""
        sent_at = self.clock()
        try:
            granted = self.client.heartbeat(
                self.job_id, claim_id=self.claim_id, last_output_at=self.last_output()
            )
        except ClaimLost as exc:
            if exc.job_status == JobStatus.CANCELLED:
                return self._verdict(Beat.CANCELLED, "the job was cancelled")
            if exc.job_status == JobStatus.QUEUED and self.clock() < self.lease.deadline:
                # Queued again, answered before our lease's end: the reaper ends only expired
                # leases (and ours never ends later than the server's), so an operator did.
                # (An answer after it, from a server frozen meanwhile, may be the reaper's.)
                return self._verdict(Beat.REQUEUED, "the job was requeued by an operator")
            status = f" (job status {exc.job_status})" if exc.job_status else ""
            return self._verdict(Beat.LEASE_LOST, f"claim lost{status}: {exc.message}")
        except NotFound as exc:
            return self._verdict(Beat.JOB_GONE, f"the job is gone: {exc.message}")
        except (ClaimMismatch, JobTerminal) as exc:
            return self._verdict(Beat.LEASE_LOST, f"claim lost: {exc.message}")
        except Exception as exc:
            # Anything else (server down, a revoked key, a bug) is retried: the supervisor
            # declares the lease lost when the local deadline passes, not this thread.
            with self._count:
                self.failures += 1
            if not self._stop.is_set():
                kind = "transient" if is_transient(exc) else "unexpected"
                self.log.warn(f"heartbeat failed ({kind} error, will retry): {describe_error(exc)}")
            return Beat.RETRY
        with self._count:
            self.beats += 1
        self.lease.renew(sent_at, granted.lease_seconds)
        expires = timestamps_as_sent(granted).get(
            "claimExpiresAt", granted.claim_expires_at.isoformat()
        )
        self.log.debug(f"heartbeat {self.beats}: lease {granted.lease_seconds}s, expires {expires}")
        return Beat.OK

    def _run(self) -> None:
        in_a_row = 0
        while not self._stop.wait(self.next_delay(in_a_row)):
            beat = self.beat_once()
            if beat is Beat.OK:
                in_a_row = 0
            elif beat is Beat.RETRY:
                in_a_row += 1
            else:
                return
