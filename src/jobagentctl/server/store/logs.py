"""``store.logs``: append an attempt's output (fenced by its claim), read it by cursor, cap it,
and expire it. The chunks live in ``job_log`` and ``job_log_attempt``,
never in the hot ``job`` and ``job_claim`` rows (an append only locks the claim row)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from jobagentctl.errors import LogExpired, LogNotFound
from jobagentctl.models import (
    LOG_CHUNK_MAX_BYTES,
    AttemptOutcome,
    JobStatus,
    LogAppendResult,
    LogPage,
    LogStream,
)
from jobagentctl.server.store import rows
from jobagentctl.server.store.connector import Connector, Params, Row
from jobagentctl.server.store.fencing import heartbeat_failure

__all__ = ["LOG_ROW_COST", "LogStore", "NewChunk"]

# What the cap counts for each stored chunk beside its bytes: its row's fixed cost on disk
# (tuple header, key, primary-key index entry), measured at about 260 bytes on PostgreSQL and
# 170 on SQLite. Without it a log of tiny chunks kept the cap's worth of bytes in as many rows:
# 1-byte chunks under a 64 KiB cap kept 65,345 rows, 10.8 MB of SQLite pages and 28.4 MB of
# PostgreSQL job_log (docs/reliability.md, section 11).
LOG_ROW_COST = 256


@dataclass(frozen=True, slots=True)
class NewChunk:
    """A chunk to append: its stream, the agent's time of it, its raw bytes."""

    stream: LogStream
    at: datetime
    data: bytes


class LogStore:
    """The store's log operations (``store.logs``).

    Scopes, errors and the database clock are as ``SqlStore`` says.
    """

    def __init__(self, db: Connector) -> None:
        self.db = db

    async def append_logs(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID,
        chunks: Sequence[NewChunk],
        *,
        max_bytes: int,
        agent_scope: UUID | None = None,
    ) -> LogAppendResult:
        """Append ``chunks`` (in order, seqs from the attempt's next) to the log of the attempt
        that ``claim_id`` holds, in one statement (SQLite: one transaction). The claim is the job's
        current one, or its revoked one whose holder has not let go: its command may print while it
        is stopped. Its row stays locked until the append commits. So the attempt's end and this
        append are ordered. Any other ``claim_id`` → ``ClaimLost`` /
        ``ClaimMismatch`` as a heartbeat's, and nothing is written; unknown job →
        ``LogNotFound``. Past ``max_bytes`` stored (each chunk's bytes plus ``LOG_ROW_COST``),
        the log is cut (:meth:`_trim`): its first half-cap kept, then one marker, then the
        newest. A request's neighbours of one stream are stored as one chunk (:func:`_merged`)."""
        chunks = _merged(chunks)
        listing = []
        position = 0
        for i, chunk in enumerate(chunks, start=1):
            listing.append(
                {
                    "i": i,
                    "stream": chunk.stream.value,
                    "at": chunk.at.timestamp(),
                    "start": position + 1,  # substr/substring count from 1
                    "len": len(chunk.data),
                    "pos": position,
                }
            )
            position += len(chunk.data)
        params = {
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "agent_scope": agent_scope,
            "n": len(listing),
            "size": position,
            "chunks": json.dumps(listing),
            "data": b"".join(chunk.data for chunk in chunks),
        }
        row = await self.db.one("log_append", **params)
        if row is None:
            row = await self._append_refused(params)
        attempt, stored, cut = int(row["attempt"]), int(row["stored_bytes"]), row["cut_bytes"]
        if stored + int(row["stored_rows"]) * LOG_ROW_COST > max_bytes:
            trimmed = await self._trim(job_id, attempt, max_bytes)
            if trimmed is not None:
                stored, cut = int(trimmed["stored_bytes"]), trimmed["cut_bytes"]
        return LogAppendResult(
            job_id=job_id,
            attempt=attempt,
            next_seq=int(row["next_seq"]),
            stored_bytes=stored,
            truncated=bool(cut),
        )

    async def _append_refused(self, params: Params) -> Row:
        """After ``log_append`` wrote nothing: why (``LogNotFound``, or ``ClaimLost`` /
        ``ClaimMismatch`` as a heartbeat's), read as a refused heartbeat's is. Or, when the
        claim id still holds the claim (current or revoked), the append once more: it was
        refused as the claim moved. An operator's requeue or cancel may commit while the fence waits
        for the claim row's lock. It makes that claim revoked after the statement's snapshot
        (PostgreSQL), which that statement cannot see. A new statement does."""
        state = await self.db.one("job_claim_state", **params)
        if state is not None and params["claim_id"] in (
            _uuid(state["claim_id"]),
            _uuid(state["revoked_claim_id"]),
        ):
            row = await self.db.one("log_append", **params)
            if row is not None:
                return row
            state = await self.db.one("job_claim_state", **params)
        if state is None:
            raise LogNotFound("job not found", details={"jobId": str(params["job_id"])})
        raise heartbeat_failure(state)

    async def _trim(self, job_id: UUID, attempt: int, max_bytes: int) -> Row | None:
        """Cut the log of an attempt over ``max_bytes`` down to seven eighths of it. A chunk counts
        its bytes plus ``LOG_ROW_COST``.

        - The head stays: chunks beginning in the first half of the cap, counted the same way.
        - The oldest chunks after it go.
        - The first one cut becomes the one truncation marker. Its text says how many bytes were cut
          in all.
        Seven eighths, so that a log at its cap is trimmed once per eighth of the
        cap appended rather than on every append."""
        return await self.db.one(
            "log_trim",
            job_id=job_id,
            attempt=attempt,
            max_bytes=max_bytes,
            row_cost=LOG_ROW_COST,
            head_bytes=max_bytes // 2,
            low_water=max_bytes - max_bytes // 8,
        )

    async def read_logs(
        self,
        workspace_id: UUID,
        job_id: UUID,
        *,
        attempt: int | None,
        after: int,
        limit: int,
        agent_scope: UUID | None = None,
    ) -> LogPage:
        """Up to ``limit`` chunks of the attempt (None: the latest) with seq > ``after``. Also
        whether the attempt has ended and nobody may append to it any more. That is read before the
        chunks: an ended attempt's page holds everything it appended after the cursor.
        Unknown job, or an attempt it does not have → ``LogNotFound``; a log deleted by
        retention → ``LogExpired``."""
        state = await self.db.one(
            "log_state",
            job_id=job_id,
            workspace_id=workspace_id,
            attempt=attempt,
            agent_scope=agent_scope,
        )
        if state is None:
            raise LogNotFound("job not found", details={"jobId": str(job_id)})
        number = state["attempt"]
        if number is None or not 1 <= int(number) <= int(state["attempts"]):
            details = {"jobId": str(job_id), "attempt": number}
            raise LogNotFound("the job has no such attempt", details=details)
        if state["expired_at"] is not None:
            raise LogExpired(
                f"the log of attempt {number} was deleted by the server's log retention",
                details={"jobId": str(job_id), "attempt": int(number)},
            )
        found = await self.db.all(
            "log_chunks", job_id=job_id, attempt=number, after=after, limit=limit
        )
        return LogPage(
            job_id=job_id,
            attempt=int(number),
            chunks=[rows.log_chunk_from_row(row) for row in found],
            next_seq=int(state["next_seq"] or 1),
            # Ended, and nobody may append any more: the holder of a revoked claim may still
            # ship its command's last output until it lets go.
            ended=state["ended_at"] is not None and not state["holder_writing"],
            outcome=None if state["outcome"] is None else AttemptOutcome(state["outcome"]),
            job_status=JobStatus(state["job_status"]),
        )

    async def expire_logs(self, retention_seconds: float, batch_size: int) -> int:
        """Delete the chunks of up to ``batch_size`` attempts that ended more than
        ``retention_seconds`` ago, and mark them expired. It is one statement (SQLite: one
        transaction). Returns how many attempts were expired."""
        row = await self.db.one(
            "log_expire", retention_seconds=retention_seconds, batch_size=batch_size
        )
        return 0 if row is None else int(row["expired_logs"])


def _uuid(value: object) -> UUID | None:
    """A claim id as read (PostgreSQL: a UUID; SQLite: its text), None as None."""
    if value is None or isinstance(value, UUID):
        return value
    return UUID(str(value))


def _merged(chunks: Sequence[NewChunk]) -> list[NewChunk]:
    """The chunks as stored, merged as ``run`` ships them. Neighbours of one output stream become
    one chunk of at most ``LOG_CHUNK_MAX_BYTES``, with the time of the first. A marker stays a chunk
    of its own. Each stored chunk is a row, whose cost the cap counts: a request of many tiny
    chunks costs the rows of a few."""
    merged: list[tuple[NewChunk, list[bytes], int]] = []
    for chunk in chunks:
        if merged:
            first, parts, size = merged[-1]
            if (
                chunk.stream == first.stream
                and chunk.stream != LogStream.MARKER
                and size + len(chunk.data) <= LOG_CHUNK_MAX_BYTES
            ):
                parts.append(chunk.data)
                merged[-1] = (first, parts, size + len(chunk.data))
                continue
        merged.append((chunk, [chunk.data], len(chunk.data)))
    return [
        first if len(parts) == 1 else NewChunk(first.stream, first.at, b"".join(parts))
        for first, parts, _ in merged
    ]
