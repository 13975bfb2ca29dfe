"""The job logs' two calls (``…/jobs/{jobId}/logs``), a part of :class:`~jobagentctl.client.Client`
of their own: the client's connection, its V1 fallbacks and its path helper are the client's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from jobagentctl import models
from jobagentctl.routes import Routes

if TYPE_CHECKING:
    from jobagentctl.client._connection import Connection
    from jobagentctl.client._ctrlplane import V1Fallback

__all__ = ["LogCalls"]


class LogCalls:
    """Appending to and reading a job attempt's log; mixed into ``Client``."""

    _conn: Connection
    _v1: V1Fallback

    def _at(self, template: str, **parts: object) -> str:
        raise NotImplementedError  # the client's

    def append_logs(
        self, job_id: UUID, claim_id: UUID, chunks: Sequence[models.LogChunkIn]
    ) -> models.LogAppendResult:
        """Append output chunks to the log of the attempt that ``claim_id`` holds (each at most
        ``models.LOG_CHUNK_MAX_BYTES`` raw; the request within the server's body limit, 1 MiB
        by default). :class:`ClaimLost` / :class:`ClaimMismatch` when the claim is not the
        job's current one (nothing written); :class:`LogsUnsupported` on a server without
        logs (ctrlplane, an older jobagentctl), learned once per process."""
        body = models.LogAppendRequest(claim_id=claim_id, chunks=list(chunks))
        path = self._at(Routes.JOB_LOGS, jobId=job_id)
        with self._v1.logs_route("POST"):
            return self._conn.call(
                "POST", path, models.LogAppendResult.from_wire, body=body, v2_route=True
            )

    def recheck_logs(self) -> None:
        """Forget that the server was found without logs: the next call asks it again (a
        long-lived ``run --loop`` outlives its server's upgrade)."""
        self._v1.forget_no_logs()

    def read_logs(
        self,
        job_id: UUID,
        *,
        attempt: int | None = None,
        after: int = 0,
        wait_seconds: float | None = None,
        limit: int | None = None,
    ) -> models.LogPage:
        """The chunks of an attempt's log (None: the latest attempt) after seq ``after``.
        ``wait_seconds``: when there are none yet and the attempt runs, the server waits up to
        that long (capped by its ``maxWaitSeconds``) for some or for the attempt's end.
        :class:`LogNotFound` for an unknown job or attempt, :class:`LogExpired` for a log past
        the server's retention, :class:`LogsUnsupported` on a server without logs."""
        params = {"attempt": attempt, "after": after, "waitSeconds": wait_seconds, "limit": limit}
        path = self._at(Routes.JOB_LOGS, jobId=job_id)
        with self._v1.logs_route("GET"):
            return self._conn.call(
                "GET",
                path,
                models.LogPage.from_wire,
                params=params,
                wait_seconds=wait_seconds,
                v2_route=True,
            )
