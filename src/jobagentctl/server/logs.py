"""Job logs above the store: scopes, chunk limits, metrics, and the follow long-poll.

An append is fenced by the store: the claim id must hold the job's current claim. A read with
``waitSeconds`` waits for new chunks or the attempt's end. Appends and status changes through this
process wake its readers at once. What other processes write is seen by a re-read every
``LOG_RECHECK_SECONDS``: another replica, another server on the SQLite file, the reaper's expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC
from uuid import UUID

from jobagentctl.errors import LogNotFound, PayloadTooLarge, ValidationError
from jobagentctl.models import (
    LOG_CHUNK_MAX_BYTES,
    LogAppendRequest,
    LogAppendResult,
    LogPage,
    LogStream,
)
from jobagentctl.server.http.auth import Principal
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.scopes import require_workspace
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store
from jobagentctl.server.store.logs import NewChunk

__all__ = ["LOG_RECHECK_SECONDS", "JobLogs"]

# A follow re-reads the attempt this often when nothing in this process woke it: bounds how
# late a chunk appended through another replica shows (one cheap read per waiting follower).
LOG_RECHECK_SECONDS = 0.5


def _no_job(job_id: UUID) -> LogNotFound:
    """The log routes' 404: ``LOG_NOT_FOUND`` tells "no such job" from "no such route"."""
    return LogNotFound("job not found", details={"jobId": str(job_id)})


class JobLogs:
    """The log operations of one app: ``append`` (the agent's key or a workspace key) and
    ``read``. Every 404 they answer is ``LogNotFound`` (code ``LOG_NOT_FOUND``), so that a
    client tells "no such job" from "no such route" (a server without logs)."""

    def __init__(
        self, store: Store, settings: ServerSettings, metrics: Metrics, stopping: asyncio.Event
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self._stopping = stopping
        # Per job: the event its followers wait on (replaced at each wake-up) and how many wait.
        self._events: dict[UUID, asyncio.Event] = {}
        self._waiting: dict[UUID, int] = {}

    def wake(self, job_id: UUID) -> None:
        """Wake this process's followers of the job (a chunk appended, a status changed)."""
        event = self._events.pop(job_id, None)
        if event is not None:
            event.set()

    async def append(
        self, principal: Principal, ws: UUID, job_id: UUID, body: LogAppendRequest
    ) -> LogAppendResult:
        """Append the body's chunks to the attempt its claim id holds. A chunk over
        ``LOG_CHUNK_MAX_BYTES`` raw → ``PayloadTooLarge``; data that is not base64, or a marker
        that is not UTF-8 → ``ValidationError``; nothing is written then."""
        require_workspace(principal, ws, error=lambda: _no_job(job_id))
        chunks: list[NewChunk] = []
        for index, chunk in enumerate(body.chunks):
            try:
                raw = chunk.raw()
            except ValueError:
                raise ValidationError(f"chunks[{index}].data is not valid base64") from None
            if len(raw) > LOG_CHUNK_MAX_BYTES:
                raise PayloadTooLarge(
                    f"chunks[{index}] holds {len(raw)} bytes, over {LOG_CHUNK_MAX_BYTES}",
                    details={"maxChunkBytes": LOG_CHUNK_MAX_BYTES},
                )
            if chunk.stream == LogStream.MARKER:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValidationError(f"chunks[{index}]: a marker is UTF-8 text") from None
            if raw:
                at = chunk.at if chunk.at.tzinfo is not None else chunk.at.replace(tzinfo=UTC)
                chunks.append(NewChunk(chunk.stream, at, raw))
        result = await self.store.logs.append_logs(
            ws,
            job_id,
            body.claim_id,
            chunks,
            max_bytes=self.settings.log_max_bytes,
            agent_scope=principal.agent_id,
        )
        self.metrics.log_chunks.inc(len(chunks))
        self.metrics.log_bytes.inc(sum(len(chunk.data) for chunk in chunks))
        self.wake(job_id)
        return result

    async def read(
        self,
        principal: Principal,
        ws: UUID,
        job_id: UUID,
        *,
        attempt: int | None,
        after: int,
        limit: int,
        wait_seconds: float | None,
        disconnected: asyncio.Event | None = None,
    ) -> LogPage:
        """The chunks of the attempt (None: the latest) after seq ``after``. With
        ``wait_seconds`` (capped by ``max_wait_seconds``): when there are none and the attempt
        runs, wait for some or for its end, then answer (possibly still empty)."""
        require_workspace(principal, ws, error=lambda: _no_job(job_id))
        wait = min(wait_seconds or 0.0, self.settings.max_wait_seconds)
        deadline = time.monotonic() + wait
        while True:
            event = self._events.setdefault(job_id, asyncio.Event())
            page = await self.store.logs.read_logs(
                ws,
                job_id,
                attempt=attempt,
                after=after,
                limit=limit,
                agent_scope=principal.agent_id,
            )
            remaining = deadline - time.monotonic()
            if page.chunks or page.ended or remaining <= 0 or self._stopping.is_set():
                return page
            # The attempt asked for stays the one answered, even if a newer one starts.
            attempt = page.attempt
            await self._wait(job_id, event, min(remaining, LOG_RECHECK_SECONDS), disconnected)
            if disconnected is not None and disconnected.is_set():
                return page  # nobody listens: the answer is moot

    async def _wait(
        self,
        job_id: UUID,
        event: asyncio.Event,
        timeout: float,
        disconnected: asyncio.Event | None,
    ) -> None:
        """Up to ``timeout`` seconds for a wake-up of the job, the server stopping or the
        client leaving."""
        self._waiting[job_id] = self._waiting.get(job_id, 0) + 1
        waits = [event.wait(), self._stopping.wait()]
        if disconnected is not None:
            waits.append(disconnected.wait())
        tasks = [asyncio.ensure_future(w) for w in waits]
        try:
            await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            left = self._waiting[job_id] - 1
            if left:
                self._waiting[job_id] = left
            else:
                del self._waiting[job_id]
                if self._events.get(job_id) is event and not event.is_set():
                    del self._events[job_id]
