"""Pieces of the store that need no driver: the named-SQL loader, row → model converters (one
per entity), the fencing decision of ``set_status`` and the per-agent wake-up registry.

Rows arrive as mappings (SQLite gives epoch floats, UUID and JSON text; PostgreSQL gives
datetimes, UUIDs and parsed JSON) and the converters accept both.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, Literal
from uuid import UUID

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    JobAgentError,
    NotFound,
    ValidationError,
)
from jobagentctl.models import (
    SLUG_PATTERN,
    TERMINAL_STATUSES,
    AttemptOutcome,
    ClaimedJob,
    ClaimState,
    Heartbeat,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
)
from jobagentctl.server.store.base import ApiKeyRecord, WorkspaceRecord

__all__ = [
    "NOTIFY_CHANNEL",
    "QueuedCounts",
    "Row",
    "StatusContext",
    "Waiters",
    "agent_from_row",
    "api_key_from_row",
    "attempt_from_row",
    "attempt_outcome_for",
    "check_lease",
    "check_slug",
    "claim_from_row",
    "claimed_job_from_row",
    "decide_status_change",
    "dump_json",
    "heartbeat_failure",
    "heartbeat_from_row",
    "id_list",
    "job_from_row",
    "load_queries",
    "merge_metadata",
    "migrations",
    "poll_for_waiters",
    "slugify",
    "wait_event",
    "workspace_from_row",
]

# The PostgreSQL channel that carries "a job was queued for agent <payload>".
NOTIFY_CHANNEL = "jobagentctl_job_queued"

Row = Mapping[str, Any]

_SLUG = re.compile(SLUG_PATTERN)
_NOT_SLUG_CHARS = re.compile(r"[^a-z0-9]+")
# What slugify appends to a slug shorter than ctrlplane's minimum ("qa" → "qa-ws").
_SHORT_SLUG_SUFFIX = "-ws"

_NAME_LINE = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$")
_INCLUDE_LINE = re.compile(r"^\s*--\s*include:\s*([a-z_][a-z0-9_]*)\s*$")
_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def _sql_dir(dialect: str) -> Traversable:
    return files("jobagentctl.server.store").joinpath("sql", dialect)


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The named blocks of ``sql/<dialect>/queries.sql``: ``-- name: x`` starts block ``x``.

    ``-- fragment: f`` starts a piece of SQL that is not a query of its own: a later line
    ``-- include: f`` is replaced by it (static text, written once, e.g. the lease and attempt
    writes that claiming by id and claiming the next job share). Fragments are defined before
    they are included.
    """
    text = _sql_dir(dialect).joinpath("queries.sql").read_text(encoding="utf-8")
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    kind: str | None = None
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is not None:
            (fragments if kind == "fragment" else queries)[name] = "\n".join(lines).strip()

    for line in text.splitlines():
        match = _NAME_LINE.match(line)
        if match:
            close()
            kind, name, lines = match.group(1), match.group(2), []
            if name in queries or name in fragments:
                raise RuntimeError(f"duplicate query name {name!r} in {dialect}/queries.sql")
        elif name is not None and (include := _INCLUDE_LINE.match(line)):
            if include.group(1) not in fragments:
                raise RuntimeError(
                    f"{dialect}/queries.sql: {name!r} includes {include.group(1)!r}, "
                    "which is not a fragment defined before it"
                )
            lines.append(fragments[include.group(1)])
        elif name is not None and not line.lstrip().startswith("--"):
            # Comment lines document the file; the server need not receive them every time.
            lines.append(line)
    close()
    return queries


@cache
def migrations(dialect: str) -> tuple[tuple[int, str], ...]:
    """``(version, script)`` of ``sql/<dialect>/migrations/NNNN_name.sql``, version ascending."""
    found: list[tuple[int, str]] = []
    for entry in _sql_dir(dialect).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [version for version, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{dialect} migrations must be numbered 1..N without gaps: {versions}")
    return tuple(found)


# --- values -----------------------------------------------------------------------------------


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


def _ts(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    # SQLite stores REAL epoch seconds computed from julianday(), whose float arithmetic leaves
    # noise below a millisecond; 'now' itself only has millisecond resolution, so round there.
    return datetime.fromtimestamp(round(float(value), 3), tz=UTC)


def _opt_ts(value: Any) -> datetime | None:
    return None if value is None else _ts(value)


def check_lease(lease_seconds: int | None) -> None:
    """The store takes any lease of at least a second (clamping is the service's job)."""
    if lease_seconds is not None and lease_seconds < 1:
        raise ValidationError("leaseSeconds must be at least 1")


def check_slug(slug: str) -> str:
    """``slug`` if it is one (ctrlplane's pattern); else a ValidationError (400, exit 2)."""
    if not _SLUG.fullmatch(slug):
        raise ValidationError(
            "a slug is 3-50 characters: lowercase letters, digits and '-' (as ctrlplane's)"
        )
    return slug


def slugify(name: str) -> str:
    """The slug derived from a workspace name (runs of other characters become one '-'), as
    migration 0002 derives it in SQL; one shorter than 3 characters gets "-ws" appended."""
    slug = _NOT_SLUG_CHARS.sub("-", name.lower()).strip("-")[:50].strip("-") or "workspace"
    return slug if len(slug) >= 3 else slug + _SHORT_SLUG_SUFFIX


def merge_metadata(current: Any, patch: dict[str, Any] | None) -> dict[str, Any]:
    """Key-by-key merge (top level only), as PostgreSQL's ``jsonb || jsonb`` does."""
    merged = _obj(current)
    if patch:
        merged.update(patch)
    return merged


# --- rows → models (one helper per entity) ----------------------------------------------------


def api_key_from_row(row: Mapping[str, Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=_uuid(row["id"]),
        workspace_id=_uuid(row["workspace_id"]),
        job_agent_id=_opt_uuid(row["job_agent_id"]),
        prefix=str(row["prefix"]),
        secret_hash=str(row["secret_hash"]),
        created_at=_ts(row["created_at"]),
        revoked_at=_opt_ts(row["revoked_at"]),
    )


def workspace_from_row(row: Mapping[str, Any]) -> WorkspaceRecord:
    return WorkspaceRecord(
        id=_uuid(row["id"]), name=row["name"], slug=row["slug"], created_at=_ts(row["created_at"])
    )


def agent_from_row(row: Mapping[str, Any]) -> JobAgent:
    return JobAgent(
        id=_uuid(row["id"]),
        workspace_id=_uuid(row["workspace_id"]),
        name=row["name"],
        type=row["type"],
        config=_obj(row["config"]),
        metadata=_obj(row["metadata"]),
    )


def _job_fields(row: Mapping[str, Any], include_dispatch_context: bool) -> dict[str, Any]:
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
    }


def job_from_row(row: Mapping[str, Any], include_dispatch_context: bool = True) -> Job:
    return Job(**_job_fields(row, include_dispatch_context))


def claimed_job_from_row(row: Mapping[str, Any]) -> ClaimedJob:
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


def heartbeat_from_row(row: Mapping[str, Any]) -> Heartbeat:
    return Heartbeat(
        job_id=_uuid(row["job_id"]),
        claim_id=_uuid(row["claim_id"]),
        attempt=int(row["attempt"]),
        lease_seconds=int(row["lease_seconds"]),
        claim_expires_at=_ts(row["claim_expires_at"]),
    )


def claim_from_row(row: Mapping[str, Any]) -> JobClaim:
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
    )


def attempt_from_row(row: Mapping[str, Any]) -> JobAttempt:
    return JobAttempt(
        attempt=int(row["attempt"]),
        claim_id=_opt_uuid(row["claim_id"]),
        job_agent_id=_uuid(row["job_agent_id"]),
        claimed_at=_ts(row["claimed_at"]),
        ended_at=_opt_ts(row["ended_at"]),
        outcome=None if row["outcome"] is None else AttemptOutcome(row["outcome"]),
    )


# --- set_status fencing -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusContext:
    """What ``set_status`` reads under the job's lock before deciding."""

    status: JobStatus
    current_claim_id: UUID | None  # the job_claim row's claim_id, None when there is no row
    current_attempt: int | None
    given_claim_outcome: str | None  # outcome of the attempt that carried the given claim_id

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StatusContext:
        return cls(
            status=JobStatus(row["status"]),
            current_claim_id=_opt_uuid(row["current_claim_id"]),
            current_attempt=row["current_attempt"],
            given_claim_outcome=row["given_claim_outcome"],
        )


def decide_status_change(
    ctx: StatusContext,
    status: JobStatus,
    *,
    claim_id: UUID | None,
    agent_scope: UUID | None,
    require_claim_id: bool,
) -> Literal["apply", "noop"]:
    """The fencing rules of ``Store.set_status``; raises the 409/400 errors, else says
    whether to write (``apply``) or answer an idempotent repeat without writing (``noop``)."""
    details: dict[str, Any] = {"jobStatus": ctx.status.value}
    if claim_id is not None:
        if ctx.current_claim_id == claim_id:
            return "apply"
        if ctx.current_claim_id is not None:
            details["attempt"] = ctx.current_attempt
            raise ClaimMismatch("another attempt holds the claim on this job", details=details)
        if (
            ctx.given_claim_outcome in (AttemptOutcome.COMPLETED, AttemptOutcome.CANCELLED)
            and ctx.status == status
        ):
            return "noop"
        raise ClaimLost("the claim is gone; the job was reaped, released or ended", details=details)
    if require_claim_id and agent_scope is not None and ctx.current_claim_id is not None:
        raise ValidationError("claimId is required to update a leased job")
    # Without a claim id every transition is allowed, as ctrlplane's V1 handler does (SPEC §3
    # "V1 parity"): an operator can requeue a failed job. Only a repeat is a no-op.
    if ctx.status in TERMINAL_STATUSES and ctx.status == status:
        return "noop"
    return "apply"


def attempt_outcome_for(status: JobStatus) -> AttemptOutcome:
    """How leaving ``inProgress`` for ``status`` closes the open attempt."""
    if status == JobStatus.CANCELLED:
        return AttemptOutcome.CANCELLED
    if status in TERMINAL_STATUSES:
        return AttemptOutcome.COMPLETED
    return AttemptOutcome.RELEASED


def heartbeat_failure(state: Mapping[str, Any] | None) -> JobAgentError:
    """The error of a heartbeat that touched no claim row (SQLite and PostgreSQL alike)."""
    if state is None:
        return NotFound("job not found")
    details: dict[str, Any] = {"jobStatus": state["status"]}
    if state["claim_id"] is not None:
        details["attempt"] = state["attempt"]
        return ClaimMismatch("another attempt holds the claim on this job", details=details)
    return ClaimLost("the claim is gone; the job was reaped, released or ended", details=details)


# --- wake-ups for long-polls ------------------------------------------------------------------


class Waiters:
    """Per-agent events for ``wait_for_job``, first come first woken; lives on one event loop
    (the server's). ``notify(agent, n)`` wakes at most ``n`` waiters: one per job queued, so an
    enqueue costs one claim attempt however many long-polls wait (issue 11 §6). ``ensure(agent,
    n)`` is the poller's: ``n`` jobs are queued, so ``n`` waiters should be awake, counting those
    woken already."""

    def __init__(self) -> None:
        # dict as an ordered set: the oldest waiter is woken first.
        self._events: dict[UUID, dict[asyncio.Event, None]] = {}

    def register(self, agent_id: UUID) -> asyncio.Event:
        event = asyncio.Event()
        self._events.setdefault(agent_id, {})[event] = None
        return event

    def unregister(self, agent_id: UUID, event: asyncio.Event, *, consumed: bool) -> None:
        """``consumed`` False: the waiter leaves without acting on a wake-up it got (cancelled,
        client gone), so the wake-up goes to the next waiter instead of being lost."""
        events = self._events.get(agent_id)
        if events is not None:
            events.pop(event, None)
            if not events:
                del self._events[agent_id]
        if event.is_set() and not consumed:
            self.notify(agent_id, 1)

    def notify(self, agent_id: UUID, jobs: int = 1) -> None:
        left = jobs
        for event in self._events.get(agent_id, {}):
            if left <= 0:
                break
            if not event.is_set():
                event.set()
                left -= 1

    def ensure(self, agent_id: UUID, jobs: int) -> None:
        events = self._events.get(agent_id, {})
        awake = sum(1 for event in events if event.is_set())
        if jobs > awake:
            self.notify(agent_id, jobs - awake)

    def ensure_all(self, counts: Mapping[UUID, int]) -> None:
        """``ensure`` for every agent of ``counts`` (jobs queued per agent)."""
        for agent_id, jobs in counts.items():
            if jobs > 0:
                self.ensure(agent_id, jobs)

    def notify_all(self) -> None:
        # After a listener reconnect notifications may have been missed, and on close every
        # waiter must return: wake everyone; the callers re-try their claim (spurious wake-ups
        # are allowed by the protocol).
        for events in self._events.values():
            for event in events:
                event.set()

    def waiting(self, agent_id: UUID) -> int:
        return len(self._events.get(agent_id, ()))

    def __iter__(self) -> Iterator[UUID]:
        return iter(list(self._events))


# What a poller asks the database: for each of these agents, how many jobs are queued ({} when
# there is nothing to ask, e.g. no other process has written since the last poll).
QueuedCounts = Callable[[list[UUID]], Awaitable[Mapping[UUID, int]]]


async def poll_for_waiters(waiters: Waiters, interval: float, queued: QueuedCounts) -> None:
    """The one poller of a process, in place of one per waiter (issue 11 §6): every
    ``interval`` seconds, if anyone waits, one ``queued(agents)`` call for every agent with
    waiters, and as many waiters woken per agent as it has jobs queued. Jobs this process
    queues wake their waiters at once (``notify``); the poller is for what it cannot hear
    (other processes on a SQLite file; PostgreSQL while LISTEN is down). Runs until
    cancelled; a failing poll is retried at the next tick (the waiters stay waiting)."""
    while True:
        await asyncio.sleep(interval)
        agents = list(waiters)
        if not agents:
            continue
        try:
            counts = await queued(agents)
        except JobAgentError:
            continue
        waiters.ensure_all(counts)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """True when ``event`` was set within ``timeout`` seconds."""
    if timeout <= 0:
        return event.is_set()
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
