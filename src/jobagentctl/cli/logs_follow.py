"""`jobs logs --follow` without `--attempt`: following the JOB, not one attempt.

It:

- waits for the job's first attempt (a job not claimed yet is not an error);
- keeps following through server outages and restarts, backing off as ``inspect-claims --watch``
  does, with a note on stderr;
- moves on to the next attempt with a marker line when one is requeued or expires;
- ends with the job's final attempt.

A server may answer the long-poll at once (``maxWaitSeconds`` 0, or a proxy with a short timeout).
It is then read at a slowing pace, not hundreds of times a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar
from uuid import UUID

from jobagentctl.client import LOG_FOLLOW_WAIT
from jobagentctl.errors import LogNotFound, ServerError, ServerUnavailable
from jobagentctl.models import TERMINAL_STATUSES, AttemptOutcome, JobStatus, LogChunk, LogPage

T = TypeVar("T")

__all__ = [
    "MAX_OUTAGE_PAUSE",
    "MAX_QUIET_PAUSE",
    "NO_OUTPUT",
    "Ended",
    "JobFollow",
    "attempt_marker",
]

# Printed on stderr for an attempt that ended without any shipped output (an agent that could
# not ship, or a command that printed nothing): an empty log is not silently an empty stdout.
NO_OUTPUT = "no output was shipped for this attempt"

# A long-poll answered sooner than this after asking for LOG_FOLLOW_WAIT seconds means the
# server did not wait (or a proxy cut it): the next read is paced instead of sent at once.
EARLY_ANSWER = 1.0
# The pace of reads against such a server: from the first pause, doubling, up to the last
# (under 10 reads in 5 s of silence; new output still shows within 2 s).
FIRST_QUIET_PAUSE = 0.5
MAX_QUIET_PAUSE = 2.0
# Waiting for an attempt that does not exist yet (the job is queued): the same pace, a little
# slower at the end, since a claim is rarer than a line of output.
MAX_CLAIM_PAUSE = 3.0
# While the server is unreachable: from 1 s, doubling up to this (a restart is seen soon).
MAX_OUTAGE_PAUSE = 10.0


@dataclass(frozen=True)
class Ended:
    """How the follow ended: the job's final attempt (None: it ended without one), how that
    attempt ended, and the job's status."""

    attempt: int | None
    outcome: AttemptOutcome | None
    job_status: JobStatus

    @property
    def succeeded(self) -> bool:
        """Whether the final attempt completed and the job is successful (exit 0)."""
        return self.outcome == AttemptOutcome.COMPLETED and self.job_status == JobStatus.SUCCESSFUL


def attempt_marker(page: LogPage, following: int) -> str:
    """The line printed between two attempts' logs."""
    how = page.outcome.value if page.outcome else "ended"
    return f"[jobagentctl: attempt {page.attempt} {how}; following attempt {following}]"


@dataclass
class JobFollow:
    """Follows job ``job_id``'s log from its latest attempt (or the first, once claimed).

    ``read(attempt, after, wait)`` reads one page, ``job_status()`` the job's status now; ``chunks``
    / ``marker`` / ``note`` receive the log's bytes, the lines between attempts and the notes for
    stderr. :meth:`run` returns how the job ended. Errors other than an unreachable or failing
    server end it (an unknown job, a key without access).
    """

    job_id: UUID
    read: Callable[[int | None, int, float | None], LogPage]
    job_status: Callable[[], JobStatus]
    chunks: Callable[[list[LogChunk]], None]
    marker: Callable[[str, int], None]
    note: Callable[[str], None]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    wait_seconds: float = LOG_FOLLOW_WAIT
    _outage_since: datetime | None = field(default=None, repr=False)
    _outage_pause: float = field(default=0.0, repr=False)

    def run(self) -> Ended:
        """Follow to the job's final attempt."""
        page = self._first_page(None)
        if page is None:  # the job ended without ever being claimed
            return Ended(None, None, self._status())
        while True:
            ended = self._attempt(page)
            if ended.outcome not in (AttemptOutcome.RELEASED, AttemptOutcome.EXPIRED):
                return Ended(ended.attempt, ended.outcome, ended.job_status)
            # Requeued or expired: the job goes on with another attempt unless it is over.
            following = ended.attempt + 1
            later = self._first_page(following)
            if later is None:
                return Ended(ended.attempt, ended.outcome, self._status())
            self.marker(attempt_marker(ended, following), following)
            page = later

    # --- one attempt ---------------------------------------------------------------------------

    def _first_page(self, attempt: int | None) -> LogPage | None:
        """The first page of ``attempt`` (None: the latest), waiting while the job has no such
        attempt yet; None once the job is over without it. A job not claimed yet gets a note."""
        pause = FIRST_QUIET_PAUSE
        noted = False
        while True:
            try:
                return self._call(partial(self.read, attempt, 0, None))
            except LogNotFound:
                status = self._status()  # an unknown job raises NotFound here: exit 5
                if status in TERMINAL_STATUSES:
                    return None
                if attempt is None and not noted:
                    self.note(f"job {self.job_id} is {status.value}: waiting for its first attempt")
                    noted = True
                self.sleep(pause)
                pause = min(pause * 2, MAX_CLAIM_PAUSE)

    def _attempt(self, page: LogPage) -> LogPage:
        """Print ``page`` and the rest of its attempt; the page that says it ended (read after
        its last chunk, so nothing it appended is missed)."""
        number, after, printed = page.attempt, 0, False
        pause = FIRST_QUIET_PAUSE
        while True:
            if page.chunks:
                self.chunks(page.chunks)
                after, printed = page.chunks[-1].seq, True
                pause = FIRST_QUIET_PAUSE
            elif page.ended:
                if not printed:
                    self.note(NO_OUTPUT)
                return page
            asked = self.clock()
            page = self._call(partial(self.read, number, after, self.wait_seconds))
            if not page.chunks and not page.ended and self.clock() - asked < EARLY_ANSWER:
                # The server did not hold the read (no long-polls, or a proxy cut it): pace
                # the next one rather than asking hundreds of times a second.
                self.sleep(pause)
                pause = min(pause * 2, MAX_QUIET_PAUSE)

    # --- outages ---------------------------------------------------------------------------------

    def _status(self) -> JobStatus:
        return self._call(self.job_status)

    def _call(self, call: Callable[[], T]) -> T:
        """``call()``, retried while the server is unreachable or failing (a note on stderr
        when that starts and when it ends)."""
        while True:
            try:
                result = call()
            except (ServerUnavailable, ServerError) as exc:
                self._failed(exc)
                continue
            if self._outage_since is not None:
                lasted = round((datetime.now(UTC) - self._outage_since).total_seconds())
                self.note(f"server reachable again after {lasted}s; following job {self.job_id}")
                self._outage_since, self._outage_pause = None, 0.0
            return result

    def _failed(self, exc: ServerUnavailable | ServerError) -> None:
        from jobagentctl.cli.sanitize import safe_text

        if self._outage_since is None:
            self._outage_since = datetime.now(UTC)
            self._outage_pause = 1.0
            self.note(
                f"server unreachable, retrying (up to every {MAX_OUTAGE_PAUSE:.0f}s): "
                f"{safe_text(exc.message)}"
            )
        else:
            self._outage_pause = min(self._outage_pause * 2, MAX_OUTAGE_PAUSE)
        self.sleep(self._outage_pause)
