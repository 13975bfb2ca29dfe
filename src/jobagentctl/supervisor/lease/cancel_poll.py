"""The claim long-poll thread: a cancel reaches the command within about a second, whatever
the lease.

A heartbeat learns that the job was cancelled only when it is sent. That is every third of the
lease: 18 s with the default lease, a minute with long ones. Instead, :class:`ClaimWatcher` keeps a
long-poll open on the server (``POST …/jobs/{id}/wait``). It answers as soon as the claim is no
longer held. Like the heartbeat thread it never acts: it posts the same news a heartbeat would
(:class:`~.lease.LeaseNews`).

A claim that ended with any status but ``cancelled`` is confirmed by one heartbeat first
(``confirm``), which gives the verdict itself. The long-poll also answers when the job's own final
report lands, and that must never read as a lost lease. On a server without the endpoint the watcher
ends quietly; heartbeats still see the cancel, later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import ClassVar

from jobagentctl.errors import LeaseUnsupported, NotFound
from jobagentctl.models import JobStatus, JobWait
from jobagentctl.supervisor.lease.claimthread import ClaimThread
from jobagentctl.supervisor.lease.job_lease import Beat
from jobagentctl.supervisor.protocol import describe_error, is_transient
from jobagentctl.supervisor.retry import Retry

__all__ = ["ClaimWatcher"]

# What each long-poll asks for; the server caps it (maxWaitSeconds, 30 s by default).
WAIT_SECONDS = 30.0
# Never open the long-poll more often than this (a server that answers at once, errors).
MIN_REOPEN_SECONDS = 1.0
# Retries of transient failures: 1–2 s at first (jittered 50–100 %), then 2–4 s for as long as
# the outage lasts. The cap is what a cancel may wait for once the server is back (plus the
# ~1 s the server takes to see it): a minute's cap made that a minute. Its cost, one request
# per running job every 2–4 s during an outage, is what the heartbeats' own retries cost.
RETRY_BASE = 2.0
RETRY_CAP = 4.0

_LATER = "a cancel reaches the command at its next heartbeat"


@dataclass(eq=False)
class ClaimWatcher(ClaimThread):
    """Keeps the claim long-poll of one job open from a daemon thread until stopped or until the
    claim ends. Then it posts the verdict (cancelled). For any other end it asks ``confirm``: one
    heartbeat, which posts its own verdict. The thread owns its client and closes it when it ends:
    nothing else uses the connection of a long-poll."""

    kind: ClassVar[str] = "claimwatch"

    _: KW_ONLY
    confirm: Callable[[], Beat]
    wait_seconds: float = WAIT_SECONDS
    polls: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)

    def _done(self) -> None:
        self.client.close()

    def _run(self) -> None:
        retry = Retry(base=RETRY_BASE, cap=RETRY_CAP, rng=self.rng, clock=self.clock)
        while not self._stop.is_set():
            opened = self.clock()
            try:
                self.polls += 1
                answer = self.client.wait_claim(
                    self.job_id, claim_id=self.claim_id, wait_seconds=self.wait_seconds
                )
            except LeaseUnsupported as exc:
                self.log.debug(exc.message)
                return
            except NotFound as exc:
                # The job is gone, or out of our key's scope: the heartbeat says which.
                what = f"the long-poll answered 404: {describe_error(exc)}"
                if self._stop.is_set() or self._settle(what, retry, route_missing_if_held=True):
                    return
                continue
            except Exception as exc:
                if self._failed(exc, retry):
                    return
                continue
            retry.succeeded()
            if self._stop.is_set():
                return  # the job is over: whatever the answer, nobody is listening
            if not answer.claim_held:
                if self._claim_ended(answer, retry):
                    return
                continue
            self._pause_since(opened)

    def _failed(self, exc: Exception, retry: Retry) -> bool:
        """Count a failed long-poll and wait out a transient one; whether the watch is over."""
        self.failures += 1
        if self._stop.is_set():
            return True
        if not is_transient(exc):
            self.log.warn(f"claim long-poll failed ({describe_error(exc)}): {_LATER}")
            return True
        delay = retry.failed()
        self.log.debug(f"claim long-poll failed (transient): {describe_error(exc)}")
        return delay is None or self._stop.wait(delay)

    def _claim_ended(self, answer: JobWait, retry: Retry) -> bool:
        """Act on a long-poll that saw the claim end; whether the watch is over."""
        if answer.status == JobStatus.CANCELLED:
            self._verdict(Beat.CANCELLED, "the job was cancelled")
            return True
        return self._settle(f"the long-poll saw the claim end (job is {answer.status})", retry)

    def _settle(self, what: str, retry: Retry, *, route_missing_if_held: bool = False) -> bool:
        """Confirm with one heartbeat that the claim is gone (the heartbeat then gives the
        verdict); whether the watch is over."""
        beat = self.confirm()
        if beat.ends_claim:
            return True
        if beat is Beat.OK and route_missing_if_held:
            # The job is there and the claim ours: the 404 was the route's (an older server).
            self.log.debug(f"the server has no claim long-poll ({what}): {_LATER}")
            return True
        self.log.debug(f"{what}, but a heartbeat then answered {beat}: watching on")
        delay = retry.failed() if beat is Beat.RETRY else MIN_REOPEN_SECONDS
        return delay is None or self._stop.wait(delay)

    def _pause_since(self, opened: float) -> None:
        """Keep at least MIN_REOPEN_SECONDS between two long-polls."""
        left = opened + MIN_REOPEN_SECONDS - self.clock()
        if left > 0:
            self._stop.wait(left)
