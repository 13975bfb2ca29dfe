"""Values in and out of rows: JSON text for the columns that hold objects, and one converter per
entity from a row to its model.

Rows arrive as mappings (SQLite gives epoch floats, UUID and JSON text; PostgreSQL gives
datetimes, UUIDs and parsed JSON) and the converters accept both.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from jobagentctl.errors import ValidationError
from jobagentctl.models import (
    AgentState,
    AttemptOutcome,
    ClaimedJob,
    ClaimState,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
    LogChunk,
    LogStream,
)
from jobagentctl.server.store.fencing import StatusContext
from jobagentctl.server.store.records import (
    ApiKeyRecord,
    HeartbeatRecord,
    StatusChange,
    WorkspaceRecord,
)

__all__ = [
    "Row",
    "agent_from_row",
    "api_key_from_row",
    "attempt_from_row",
    "claim_from_row",
    "claimed_job_from_row",
    "dump_json",
    "heartbeat_from_row",
    "id_list",
    "job_from_row",
    "log_chunk_from_row",
    "merge_metadata",
    "pg_timestamptz_in",
    "pg_timestamptz_out",
    "status_change_from_row",
    "status_context_from_row",
    "workspace_from_row",
]

Row = Mapping[str, Any]


def dump_json(value: Any) -> str:
    """JSON text for a column; NaN/Infinity and unserialisable values are the caller's fault."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
        text.encode("utf-8")  # a lone surrogate is valid JSON but no column can hold it
    except UnicodeEncodeError as exc:
        raise ValidationError("text must be valid UTF-8 (no lone surrogates)") from exc
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value is not valid JSON: {exc}") from exc
    return text


def merge_metadata(current: Any, patch: dict[str, Any] | None) -> dict[str, Any]:
    """Key-by-key merge (top level only), as PostgreSQL's ``jsonb || jsonb`` does."""
    merged = _obj(current)
    if patch:
        merged.update(patch)
    return merged


def _json(value: Any) -> Any:
    if isinstance(value, str | bytes):
        return json.loads(value)
    return value


def _obj(value: Any) -> dict[str, Any]:
    loaded = _json(value) if value is not None else None
    return loaded if isinstance(loaded, dict) else {}


def _uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def _opt_uuid(value: Any) -> UUID | None:
    return None if value is None else _uuid(value)


def id_list(value: Any) -> list[UUID]:
    """UUIDs from an array column (PostgreSQL) or a JSON array text (SQLite); NULL → []."""
    return [_uuid(v) for v in (_json(value) or ())]


# A stored time no datetime can hold (written before the edge refused such times, or by hand)
# reads as the nearest one that can: a read must never fail on a value already stored.
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _ts(value: Any) -> datetime:
    if isinstance(value, datetime):
        try:
            return value.astimezone(UTC)
        except OverflowError:
            return _EARLIEST if value.year < 5000 else _LATEST
    # SQLite stores REAL epoch seconds computed from julianday(), whose float arithmetic leaves
    # noise below a millisecond; 'now' itself only has millisecond resolution, so round there.
    seconds = round(float(value), 3)
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return _EARLIEST if seconds < 0 else _LATEST


# PostgreSQL's binary timestamptz: microseconds since 2000-01-01 UTC, infinities at the ends of
# int64. The driver's own decoder raises on a value outside datetime's years (1 to 9999), which
# would fail the whole read; these clamp it instead (pg_timestamptz_in) and encode as the
# driver did (pg_timestamptz_out: a naive datetime is local time, a date its local midnight).
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_PG_INFINITY = 2**63 - 1
_PG_MIN_US = int((_EARLIEST - _PG_EPOCH) / timedelta(microseconds=1))
_PG_MAX_US = int((_LATEST - _PG_EPOCH) / timedelta(microseconds=1))


def pg_timestamptz_in(value: tuple[int]) -> datetime:
    """A timestamptz in the driver's tuple format, within datetime's range."""
    (micros,) = value
    if micros <= _PG_MIN_US:
        return _EARLIEST
    if micros >= _PG_MAX_US:
        return _LATEST
    return _PG_EPOCH + timedelta(microseconds=micros)


def pg_timestamptz_out(value: datetime | date) -> tuple[int]:
    """A datetime (or date) as the driver's tuple format of timestamptz."""
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day).astimezone()
    if value == datetime.max:
        return (_PG_INFINITY,)
    if value == datetime.min:
        return (-_PG_INFINITY - 1,)
    return ((value.astimezone(UTC) - _PG_EPOCH) // timedelta(microseconds=1),)


def _opt_ts(value: Any) -> datetime | None:
    return None if value is None else _ts(value)


def api_key_from_row(row: Row) -> ApiKeyRecord:
    """An ``api_key`` row."""
    return ApiKeyRecord(
        id=_uuid(row["id"]),
        workspace_id=_uuid(row["workspace_id"]),
        job_agent_id=_opt_uuid(row["job_agent_id"]),
        prefix=str(row["prefix"]),
        secret_hash=str(row["secret_hash"]),
        created_at=_ts(row["created_at"]),
        revoked_at=_opt_ts(row["revoked_at"]),
    )


def workspace_from_row(row: Row) -> WorkspaceRecord:
    """A ``workspace`` row."""
    return WorkspaceRecord(
        id=_uuid(row["id"]), name=row["name"], slug=row["slug"], created_at=_ts(row["created_at"])
    )


def agent_from_row(row: Row) -> JobAgent:
    """A ``job_agent`` row."""
    return JobAgent(
        id=_uuid(row["id"]),
        workspace_id=_uuid(row["workspace_id"]),
        name=row["name"],
        type=row["type"],
        config=_obj(row["config"]),
        metadata=_obj(row["metadata"]),
        state=None if row.get("state") is None else AgentState(row["state"]),
        last_seen_at=_opt_ts(row.get("last_seen_at")),
        held_claims=None if row.get("held_claims") is None else int(row["held_claims"]),
    )


def _job_fields(row: Row, include_dispatch_context: bool) -> dict[str, Any]:
    return {
        "id": _uuid(row["id"]),
        "job_agent_id": _opt_uuid(row["job_agent_id"]),
        "job_agent_config": _obj(row["job_agent_config"]),
        "status": JobStatus(row["status"]),
        "created_at": _ts(row["created_at"]),
        "updated_at": _ts(row["updated_at"]),
        "metadata": _obj(row["metadata"]),
        "external_id": row["external_id"],
        "message": row["message"],
        "started_at": _opt_ts(row["started_at"]),
        "completed_at": _opt_ts(row["completed_at"]),
        "dispatch_context": _obj(row["dispatch_context"]) if include_dispatch_context else None,
        # Said only when true (absent otherwise, as from ctrlplane): see Job.claim_held.
        "claim_held": True if row.get("claim_held") else None,
    }


def job_from_row(row: Row, include_dispatch_context: bool = True) -> Job:
    """A ``job`` row; ``dispatch_context`` None unless asked for (lists leave it out)."""
    return Job(**_job_fields(row, include_dispatch_context))


def claimed_job_from_row(row: Row) -> ClaimedJob:
    """A claimed job: the job columns plus ``claim_id, lease_seconds, claimed_at,
    claim_expires_at, attempt`` (the first, second and fourth None or absent when unleased)."""
    return ClaimedJob(
        **_job_fields(row, True),
        claim_id=_opt_uuid(row.get("claim_id")),
        lease_seconds=row.get("lease_seconds"),
        claimed_at=_ts(row["claimed_at"]),
        claim_expires_at=_opt_ts(row.get("claim_expires_at")),
        attempt=int(row["attempt"]),
    )


def heartbeat_from_row(row: Row) -> HeartbeatRecord:
    """The ``job_claim`` row a heartbeat touched, with the claim's agent."""
    return HeartbeatRecord(
        job_id=_uuid(row["job_id"]),
        claim_id=_uuid(row["claim_id"]),
        attempt=int(row["attempt"]),
        lease_seconds=int(row["lease_seconds"]),
        claim_expires_at=_ts(row["claim_expires_at"]),
        job_agent_id=_opt_uuid(row.get("job_agent_id")),
    )


def claim_from_row(row: Row) -> JobClaim:
    """``state`` was judged in SQL with the database clock; ``last_heartbeat_at`` is derived."""
    expires = _opt_ts(row["claim_expires_at"])
    lease = row["lease_seconds"]
    return JobClaim(
        job_id=_uuid(row["job_id"]),
        job_agent_id=_uuid(row["job_agent_id"]),
        claim_id=_opt_uuid(row["claim_id"]),
        attempt=row["attempt"],
        claimed_at=_opt_ts(row["claimed_at"]),
        claim_expires_at=expires,
        lease_seconds=lease,
        last_heartbeat_at=(
            expires - timedelta(seconds=lease) if expires is not None and lease else None
        ),
        state=ClaimState(row["state"]),
        last_output_at=_opt_ts(row["last_output_at"]),
    )


def attempt_from_row(row: Row) -> JobAttempt:
    """A ``job_attempt`` row (``ended_at`` and ``outcome`` None while it is open)."""
    return JobAttempt(
        attempt=int(row["attempt"]),
        claim_id=_opt_uuid(row["claim_id"]),
        job_agent_id=_uuid(row["job_agent_id"]),
        claimed_at=_ts(row["claimed_at"]),
        ended_at=_opt_ts(row["ended_at"]),
        outcome=None if row["outcome"] is None else AttemptOutcome(row["outcome"]),
    )


def status_change_from_row(row: Row) -> StatusChange:
    """The job's status and agent after a status change (its row, or the row read under lock)."""
    return StatusChange(JobStatus(row["status"]), _opt_uuid(row["job_agent_id"]))


def status_context_from_row(row: Row) -> StatusContext:
    """What ``status_context`` read under the job's lock, for the fencing decision."""
    return StatusContext(
        status=JobStatus(row["status"]),
        current_claim_id=_opt_uuid(row["current_claim_id"]),
        current_attempt=row["current_attempt"],
        given_claim_outcome=row["given_claim_outcome"],
    )


def log_chunk_from_row(row: Row) -> LogChunk:
    """A stored log chunk (``job_log``), its bytes as base64 for the wire."""
    return LogChunk(
        seq=int(row["seq"]),
        offset=int(row["byte_offset"]),
        stream=LogStream(row["stream"]),
        at=_ts(row["at"]),
        data=base64.b64encode(bytes(row["data"])).decode("ascii"),
    )
