"""The wire models of job logs (``…/jobs/{jobId}/logs``): chunks as appended and as stored,
and the append's and the read's answers; re-exported by :mod:`jobagentctl.models`."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from pydantic import Field

from jobagentctl.models.wire import AttemptOutcome, JobStatus, RequestModel, WireModel, WireTime

__all__ = [
    "LOG_CHUNK_MAX_BYTES",
    "LogAppendRequest",
    "LogAppendResult",
    "LogChunk",
    "LogChunkIn",
    "LogPage",
    "LogStream",
]


class LogStream(StrEnum):
    """Where a log chunk came from: the command's two streams, or a marker. A marker is a line of
    our own in UTF-8: output dropped by the agent, or cut by the server's cap."""

    STDOUT = "stdout"
    STDERR = "stderr"
    MARKER = "marker"


# The most raw bytes one chunk may carry (its base64 on the wire is a third longer).
LOG_CHUNK_MAX_BYTES = 64 * 1024


def _unbase64(data: str) -> bytes:
    """Strict base64 (RFC 4648 alphabet, padding required); ``ValueError`` otherwise."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("data is not valid base64") from exc


class LogChunkIn(RequestModel):
    """One chunk of an append: its stream, the agent's time of it, and its raw bytes as base64. Any
    bytes: output that is not UTF-8 is stored and read back exactly."""

    stream: LogStream
    at: WireTime = Field(description="The agent's time of the chunk (RFC 3339, with an offset)")
    data: str = Field(description="The chunk's raw bytes, base64 (RFC 4648), at most 64 KiB")

    @classmethod
    def of(cls, stream: LogStream, at: datetime, raw: bytes) -> LogChunkIn:
        """A chunk of ``raw`` bytes."""
        return cls(stream=stream, at=at, data=base64.b64encode(raw).decode("ascii"))

    def raw(self) -> bytes:
        """The chunk's bytes; ``ValueError`` when ``data`` is not valid base64."""
        return _unbase64(self.data)


class LogAppendRequest(RequestModel):
    """Body of ``POST …/jobs/{jobId}/logs``: chunks for the attempt that ``claim_id`` holds."""

    claim_id: UUID
    chunks: list[LogChunkIn] = Field(max_length=1000)


class LogAppendResult(WireModel):
    """The answer of an append. It holds the attempt written to and the seq its next chunk gets.
    Also the bytes its log holds now, and whether the cap has cut some of it."""

    job_id: UUID
    attempt: int
    next_seq: int
    stored_bytes: int
    truncated: bool


class LogChunk(WireModel):
    """One stored chunk: ``seq`` (from 1 per attempt), ``offset`` (its first byte among every
    byte appended to the attempt), stream, the agent's time, and the bytes as base64."""

    seq: int = Field(description="The chunk's number in its attempt's log, from 1")
    offset: int = Field(description="Where its first byte sits among the attempt's bytes")
    stream: LogStream
    at: datetime = Field(description="The agent's time of the chunk")
    data: str = Field(description="The chunk's raw bytes, base64 (RFC 4648)")

    def raw(self) -> bytes:
        """The chunk's bytes; ``ValueError`` when ``data`` is not valid base64."""
        return _unbase64(self.data)


class LogPage(WireModel):
    """The answer of ``GET …/jobs/{jobId}/logs``: the chunks after the cursor, the seq the next
    chunk will get, and whether the attempt has ended (then ``outcome``); ``job_status`` is the
    job's status now."""

    job_id: UUID
    attempt: int
    chunks: list[LogChunk]
    next_seq: int
    ended: bool
    outcome: AttemptOutcome | None = None
    job_status: JobStatus
