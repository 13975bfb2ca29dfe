"""The lease as the agent sees it, and the thread that keeps it alive with heartbeats.

The local deadline is conservative: it counts from when a request was *sent*, so the server's
expiry (counted from when it *received* the request) is never earlier than ours.
"""

from __future__ import annotations

import enum
import random
import threading
import time
from collections.abc import Callable
from uuid import UUID

from jobagentctl.errors import ClaimLost, ClaimMismatch, JobTerminal, NotFound
from jobagentctl.models import JobStatus, heartbeat_interval
from jobagentctl.supervisor import retry
from jobagentctl.supervisor.protocol import SupervisorClient, describe_error, is_transient

__all__ = [
    "Beat",
    "Heartbeater",
    "Lease",
    "backoff_delay",
]

# First retry delay after a failed heartbeat; doubles per failure up to the interval.
BACKOFF_BASE = 0.25


def backoff_delay(failures: int, interval: float, rng: random.Random) -> float:
    """Delay before retry number ``failures`` (≥ 1): exponential, capped at the interval."""
    return retry.backoff_delay(failures, BACKOFF_BASE, interval, rng)


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
    """The outcome of one heartbeat."""

    OK = "ok"
    RETRY = "retry"  # failed in a way worth retrying: server down, 5xx, timeout, …
    LEASE_LOST = "lease_lost"  # the claim is gone: reaped, released, or another attempt's
    CANCELLED = "cancelled"  # an operator cancelled the job
    JOB_GONE = "job_gone"  # the job itself is gone (deleted: 404)


class Heartbeater:
    """Heartbeats one claim from a daemon thread until stopped or told the claim is gone.

    Failures are retried with jittered exponential backoff (capped at the interval) for as
    long as the thread runs: declaring the lease lost when the local deadline passes is the
    supervisor's decision, not this thread's. A definitive answer (409, 404) ends the loop and
    is handed to ``on_verdict`` (``Beat.LEASE_LOST``, ``Beat.CANCELLED`` or
    ``Beat.JOB_GONE``, and why).
    """

    def __init__(
        self,
        client: SupervisorClient,
        job_id: UUID,
        claim_id: UUID,
        lease: Lease,
        *,
        on_verdict: Callable[[Beat, str], None],
        log: Callable[[str], None],
        debug: Callable[[str], None],
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.claim_id = claim_id
        self.lease = lease
        self.beats = 0
        self.failures = 0
        self._on_verdict = on_verdict
        self._log = log
        self._debug = debug
        self._rng = rng or random.Random()
        self._clock = clock
        self._stop = threading.Event()
        # beat_once also runs on the claim long-poll's thread (its confirmation heartbeat).
        self._count = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the request in flight, if any, waiting up to ``timeout`` for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def next_delay(self, failures_in_a_row: int) -> float:
        """The sleep before the next heartbeat: 75–100 % of the interval, or a backoff."""
        interval = heartbeat_interval(self.lease.seconds)
        if failures_in_a_row:
            return backoff_delay(failures_in_a_row, interval, self._rng)
        return interval * self._rng.uniform(0.75, 1.0)

    def beat_once(self) -> Beat:
        """Send one heartbeat and account for it (counters, lease, log, verdict). Thread-safe:
        the claim long-poll's thread calls it too, to confirm that a claim ended."""
        sent_at = self._clock()
        try:
            granted = self.client.heartbeat(self.job_id, claim_id=self.claim_id)
        except ClaimLost as exc:
            if exc.job_status == JobStatus.CANCELLED:
                return self._give_up(Beat.CANCELLED, "the job was cancelled")
            status = f" (job is {exc.job_status})" if exc.job_status else ""
            return self._give_up(Beat.LEASE_LOST, f"claim lost{status}: {exc.message}")
        except NotFound as exc:
            return self._give_up(Beat.JOB_GONE, f"the job is gone: {exc.message}")
        except (ClaimMismatch, JobTerminal) as exc:
            return self._give_up(Beat.LEASE_LOST, f"claim lost: {exc.message}")
        except Exception as exc:
            # Anything else (server down, a revoked key, a bug) is retried: the supervisor
            # declares the lease lost when the local deadline passes, not this thread.
            with self._count:
                self.failures += 1
            if not self._stop.is_set():
                kind = "transient" if is_transient(exc) else "unexpected"
                self._log(f"heartbeat failed ({kind} error, will retry): {describe_error(exc)}")
            return Beat.RETRY
        with self._count:
            self.beats += 1
        self.lease.renew(sent_at, granted.lease_seconds)
        self._debug(
            f"heartbeat {self.beats}: lease {granted.lease_seconds}s, "
            f"expires {granted.claim_expires_at.isoformat()}"
        )
        return Beat.OK

    def _give_up(self, verdict: Beat, why: str) -> Beat:
        if not self._stop.is_set():
            # Only while running: after stop() the job is over and nobody is listening.
            self._stop.set()
            self._on_verdict(verdict, why)
        return verdict

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
