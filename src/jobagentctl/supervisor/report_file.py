"""The per-job record `run --report PATH` writes: one JSON object per job, one line each.

Field names are camelCase like the rest of the wire; timestamps are RFC 3339 UTC.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from jobagentctl.supervisor.outcome import StopReason, Verdict

__all__ = ["JobRecord", "open_report", "utc_now", "write_record"]


def utc_now() -> datetime:
    """Now, in UTC (the record's timestamps)."""
    return datetime.now(UTC)


def _rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class JobRecord:
    """What happened to one claimed job.

    ``status`` is the job status this run left the job in, as far as it knows. It is the terminal
    status it reported, ``queued`` after a release, or ``cancelled``. It is None when the lease was
    lost or the report failed. ``exitCode`` is the child's exit status (None when a signal killed
    it, 126/127 when it could not start); ``signal`` the number of the signal that killed it;
    ``reason`` why the run stopped it (a :class:`~.outcome.StopReason`) or None when it ended on its
    own; ``message`` the status message reported with it, redacted as it was sent. ``verdict`` is
    how the run ended (a :class:`~.outcome.Verdict` or a stop reason): ``completed`` means the exit
    code is the command's own. Without a job (``no_job``, or a ``failed`` claim) ``jobId`` is None.
    The enums are written as their values, which docs/run.md lists.
    """

    job_id: UUID | None
    claim_id: UUID | None
    attempt: int | None
    started_at: datetime
    verdict: Verdict | StopReason | None = None
    status: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: StopReason | None = None
    finished_at: datetime | None = None
    duration_seconds: float = 0.0
    heartbeats: int = 0
    heartbeat_failures: int = 0
    reported: bool = False
    # The status message sent with the report (secrets redacted), None without one.
    message: str | None = None

    def to_json(self) -> str:
        """The record as one line of JSON (camelCase fields, as on the wire)."""
        return json.dumps(
            {
                "verdict": None if self.verdict is None else self.verdict.value,
                "jobId": str(self.job_id) if self.job_id else None,
                "claimId": str(self.claim_id) if self.claim_id else None,
                "attempt": self.attempt,
                "status": self.status,
                "exitCode": self.exit_code,
                "signal": self.signal,
                "reason": None if self.reason is None else self.reason.value,
                "startedAt": _rfc3339(self.started_at),
                "finishedAt": _rfc3339(self.finished_at),
                "durationSeconds": round(self.duration_seconds, 3),
                "heartbeats": self.heartbeats,
                "heartbeatFailures": self.heartbeat_failures,
                "reported": self.reported,
                "message": self.message,
            }
        )


def open_report(path: Path, *, append: bool) -> None:
    """Make sure ``path`` can take the records before anything is claimed (OSError if not).

    Without ``append`` the file is emptied now: a record an earlier run left there is never read as
    this run's. A run killed before it wrote its own leaves an empty file, no verdict.
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    os.close(os.open(path, flags, 0o644))


def write_record(path: Path, record: JobRecord, *, append: bool) -> None:
    """Write ``record`` as one line; ``append`` adds to the file (``--loop``)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    # One write() of a whole line, so concurrent appenders never interleave inside a record.
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, (record.to_json() + "\n").encode())
    finally:
        os.close(fd)
