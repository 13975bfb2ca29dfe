"""The embedded SQLite store: zero set-up, one file, safe to share between server processes.

One connection per store, driven by one worker thread. A write of several statements is one
``BEGIN IMMEDIATE`` transaction and a single write statement is its own: either way it holds
SQLite's database lock from its start, which serialises lease decisions (WAL, busy_timeout).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID, uuid4

from jobagentctl.errors import (
    Conflict,
    JobAgentError,
    NotClaimable,
    NotFound,
    ServerError,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.models import (
    TERMINAL_STATUSES,
    ClaimedJob,
    Heartbeat,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
)
from jobagentctl.server.store._sql import (
    CLAIM_STATES,
    StatusContext,
    Waiters,
    agent_from_row,
    api_key_from_row,
    attempt_from_row,
    attempt_outcome_for,
    check_lease,
    claim_from_row,
    claimed_job_from_row,
    decide_status_change,
    dump_json,
    heartbeat_failure,
    heartbeat_from_row,
    job_from_row,
    load_queries,
    merge_metadata,
    migrations,
    wait_event,
)
from jobagentctl.server.store.base import ApiKeyRecord, ReapResult

__all__ = ["SqliteStore"]

Row = dict[str, Any]
T = TypeVar("T")

Q = load_queries("sqlite")


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    return {column[0]: value for column, value in zip(cursor.description, values, strict=True)}


def _one(conn: sqlite3.Connection, query: str, params: dict[str, Any] | None = None) -> Row | None:
    """The first row. Reads every row so the statement is finished (and its implicit
    transaction, if any, committed) before we go on: a half-read RETURNING keeps the lock."""
    rows: list[Row] = conn.execute(query, params or {}).fetchall()
    return rows[0] if rows else None


def _the(conn: sqlite3.Connection, query: str, params: dict[str, Any] | None = None) -> Row:
    """The one row a statement always returns (an aggregate, a write to a row we hold)."""
    row = _one(conn, query, params)
    if row is None:
        raise ServerError("a statement returned no row where one was certain")
    return row


def _id(value: UUID | None) -> str | None:
    return None if value is None else str(value)


def _split_script(script: str) -> Iterator[str]:
    """Statements of a migration script, so they can run inside our own transaction
    (``executescript`` would commit first)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statement = pending.strip()
            pending = ""
            if statement.strip(";").strip() and not _only_comments(statement):
                yield statement
    if pending.strip() and not _only_comments(pending):
        raise RuntimeError("migration script ends with an incomplete statement")


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())


class SqliteStore:
    """``Store`` on one SQLite file."""

    dialect = "sqlite"

    def __init__(
        self, path: str, *, busy_timeout_ms: int = 30_000, poll_interval: float = 1.0
    ) -> None:
        self.path = path
        self._busy_timeout = busy_timeout_ms / 1000.0
        # Other server processes on the same file cannot signal us: long-polls also re-check
        # the queue this often.
        self._poll_interval = poll_interval
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._waiters = Waiters()

    # --- plumbing ------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None or self._conn is None:
            raise ServerUnavailable("the SQLite store is not open")
        conn = self._conn
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self._call, fn, conn))

    @staticmethod
    def _call(fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
        try:
            return fn(conn)
        except JobAgentError:
            raise
        except sqlite3.OperationalError as exc:
            # Locked past busy_timeout, unreadable file, missing schema: an operator problem,
            # reported without the statement text.
            raise ServerUnavailable(
                "the SQLite database is unavailable (locked, unreadable or not migrated)"
            ) from exc
        except sqlite3.Error as exc:
            raise ServerError("unexpected SQLite error") from exc
        except UnicodeEncodeError as exc:
            # A lone surrogate ("\\ud800" in JSON) is valid JSON but not UTF-8 text; PostgreSQL
            # refuses it too.
            raise ValidationError("text must be valid UTF-8 (no lone surrogates)") from exc
        except OverflowError as exc:
            # sqlite3 binds integers as 64-bit; PostgreSQL refuses larger ones the same way.
            raise ValidationError("a number is out of range (64-bit integers only)") from exc

    @staticmethod
    @contextmanager
    def _write(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
        conn.execute(begin)
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _page(
        conn: sqlite3.Connection, query: str, params: dict[str, Any]
    ) -> tuple[list[Row], int]:
        rows: list[Row] = conn.execute(query, params).fetchall()
        if rows:
            return rows, int(rows[0]["total"])
        if params["offset"] == 0:
            return [], 0
        # Past the end: the window count needs one row to ride on.
        first: list[Row] = conn.execute(query, {**params, "offset": 0, "limit": 1}).fetchall()
        return [], int(first[0]["total"]) if first else 0

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobagentctl-sqlite")
        loop = asyncio.get_running_loop()
        try:
            self._conn = await loop.run_in_executor(self._executor, self._connect)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN IMMEDIATE/COMMIT ourselves.
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = _dict_row
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except (sqlite3.Error, OSError) as exc:
            raise ServerUnavailable(f"cannot open the SQLite database at {self.path}") from exc
        return conn

    async def close(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn = self._executor = None
        if conn is not None and executor is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(executor, conn.close)
        if executor is not None:
            executor.shutdown(wait=True)
        self._waiters.notify_all()

    async def migrate(self) -> list[int]:
        def run(conn: sqlite3.Connection) -> list[int]:
            applied_now: list[int] = []
            with self._write(conn, Q["migrate_lock"]):
                conn.execute(Q["migrations_table"])
                done = {row["version"] for row in conn.execute(Q["applied_versions"])}
                for version, script in migrations("sqlite"):
                    if version in done:
                        continue
                    for statement in _split_script(script):
                        conn.execute(statement)
                    conn.execute(Q["record_migration"], {"version": version})
                    applied_now.append(version)
            return applied_now

        return await self._run(run)

    async def schema_current(self) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            conn.execute(Q["migrations_table"])
            done = {row["version"] for row in conn.execute(Q["applied_versions"])}
            return all(version in done for version, _ in migrations("sqlite"))

        try:
            return await self._run(run)
        except JobAgentError:
            return False

    # --- workspaces and keys -------------------------------------------------------------------

    async def create_workspace(self, name: str) -> UUID:
        workspace_id = uuid4()

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(Q["create_workspace"], {"id": str(workspace_id), "name": name})

        await self._run(run)
        return workspace_id

    async def workspace_exists(self, workspace_id: UUID) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            return _one(conn, Q["workspace_exists"], {"id": str(workspace_id)}) is not None

        return await self._run(run)

    async def create_api_key(
        self, workspace_id: UUID, job_agent_id: UUID | None, prefix: str, secret_hash: str
    ) -> UUID:
        key_id = uuid4()
        params = {
            "id": str(key_id),
            "workspace_id": str(workspace_id),
            "job_agent_id": _id(job_agent_id),
            "prefix": prefix,
            "secret_hash": secret_hash,
        }

        def run(conn: sqlite3.Connection) -> Row | None:
            try:
                return _one(conn, Q["create_api_key"], params)
            except sqlite3.IntegrityError as exc:
                raise Conflict("an API key with this prefix already exists") from exc

        if await self._run(run) is None:
            raise NotFound("workspace or job agent not found")
        return key_id

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        row = await self._run(lambda conn: _one(conn, Q["get_api_key"], {"prefix": prefix}))
        return None if row is None else api_key_from_row(row)

    async def revoke_api_key(self, key_id: UUID) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            return _one(conn, Q["revoke_api_key"], {"id": str(key_id)}) is not None

        return await self._run(run)

    # --- agents --------------------------------------------------------------------------------

    async def upsert_agent(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        name: str,
        type: str,
        config: dict[str, Any],
        metadata: dict[str, Any] | None,
    ) -> JobAgent:
        params = {
            "id": str(agent_id),
            "workspace_id": str(workspace_id),
            "name": name,
            "type": type,
            "config": dump_json(config),
            "metadata": None if metadata is None else dump_json(metadata),
        }

        def run(conn: sqlite3.Connection) -> Row | None:
            try:
                return _one(conn, Q["upsert_agent"], params)
            except sqlite3.IntegrityError as exc:  # unknown workspace (foreign key)
                raise NotFound("workspace not found") from exc

        row = await self._run(run)
        if row is None:
            raise NotFound("job agent not found")
        return agent_from_row(row)

    async def get_agent(self, workspace_id: UUID, agent_id: UUID) -> JobAgent | None:
        params = {"id": str(agent_id), "workspace_id": str(workspace_id)}

        row = await self._run(lambda conn: _one(conn, Q["get_agent"], params))
        return None if row is None else agent_from_row(row)

    async def list_agents(
        self, workspace_id: UUID, limit: int, offset: int
    ) -> tuple[list[JobAgent], int]:
        params = {"workspace_id": str(workspace_id), "limit": limit, "offset": offset}
        rows, total = await self._run(lambda conn: self._page(conn, Q["list_agents"], params))
        return [agent_from_row(row) for row in rows], total

    async def delete_agent(self, workspace_id: UUID, agent_id: UUID) -> bool:
        params = {"id": str(agent_id), "workspace_id": str(workspace_id)}

        def run(conn: sqlite3.Connection) -> bool:
            return _one(conn, Q["delete_agent"], params) is not None

        return await self._run(run)

    # --- jobs ----------------------------------------------------------------------------------

    async def create_job(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_agent_config: dict[str, Any] | None,
        dispatch_context: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> Job:
        params = {
            "id": str(uuid4()),
            "agent_id": str(agent_id),
            "workspace_id": str(workspace_id),
            "job_agent_config": None if job_agent_config is None else dump_json(job_agent_config),
            "dispatch_context": dump_json(dispatch_context or {}),
            "metadata": dump_json(metadata or {}),
        }

        row = await self._run(lambda conn: _one(conn, Q["create_job"], params))
        if row is None:
            raise NotFound("job agent not found")
        self._waiters.notify(agent_id)
        return job_from_row(row)

    async def get_job(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> Job | None:
        params = {
            "job_id": str(job_id),
            "workspace_id": str(workspace_id),
            "agent_scope": _id(agent_scope),
        }

        row = await self._run(lambda conn: _one(conn, Q["get_job"], params))
        return None if row is None else job_from_row(row)

    async def list_jobs(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        statuses: list[JobStatus] | None,
        include_dispatch_context: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Job], int]:
        params = {
            "workspace_id": str(workspace_id),
            "agent_id": _id(agent_id),
            "statuses": None if statuses is None else json.dumps([s.value for s in statuses]),
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._run(lambda conn: self._page(conn, Q["list_jobs"], params))
        return [job_from_row(row, include_dispatch_context) for row in rows], total

    # --- leases --------------------------------------------------------------------------------

    @staticmethod
    def _claim(
        conn: sqlite3.Connection, query: str, params: dict[str, Any], lease_seconds: int | None
    ) -> Row | None:
        """The claim transaction: flip the job, open the attempt, record the lease."""
        with SqliteStore._write(conn):
            row = _one(conn, query, params)
            if row is None:
                return None
            step = {
                "job_id": row["id"],
                "agent_id": row["job_agent_id"],
                "now": row["started_at"],
                "claim_id": None if lease_seconds is None else str(uuid4()),
                "lease_seconds": lease_seconds,
            }
            attempt = _the(conn, Q["claim_attempt"], step)
            claimed = {
                **row,
                "attempt": attempt["attempt"],
                "claimed_at": attempt["claimed_at"],
                "claim_id": step["claim_id"],
                "lease_seconds": lease_seconds,
                "claim_expires_at": None,
            }
            if lease_seconds is not None:
                lease = _the(conn, Q["claim_lease"], {**step, "attempt": attempt["attempt"]})
                claimed["claim_expires_at"] = lease["claim_expires_at"]
            return claimed

    async def claim_job(
        self, workspace_id: UUID, agent_id: UUID, job_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob:
        check_lease(lease_seconds)
        params = {
            "job_id": str(job_id),
            "agent_id": str(agent_id),
            "workspace_id": str(workspace_id),
            "agent_scope": str(agent_id),
        }

        def run(conn: sqlite3.Connection) -> Row:
            claimed = self._claim(conn, Q["claim_job"], params, lease_seconds)
            if claimed is not None:
                return claimed
            state: Row | None = _one(conn, Q["job_claim_state"], params)
            if state is None:
                raise NotFound("job not found")
            raise NotClaimable(
                f"the job is {state['status']}, not queued", details={"jobStatus": state["status"]}
            )

        return claimed_job_from_row(await self._run(run))

    async def claim_next(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob | None:
        check_lease(lease_seconds)
        params = {"agent_id": str(agent_id), "workspace_id": str(workspace_id)}
        row = await self._run(
            lambda conn: self._claim(conn, Q["claim_next"], params, lease_seconds)
        )
        return None if row is None else claimed_job_from_row(row)

    async def wait_for_job(self, agent_id: UUID, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self._waiters.register(agent_id)
        params = {"agent_id": str(agent_id)}

        def queued(conn: sqlite3.Connection) -> bool:
            return _one(conn, Q["queued_exists"], params) is not None

        try:
            while True:
                # Checked after registering, so a job queued since the caller's claim attempt
                # (here or by another process on this file) is never missed.
                if await self._run(queued):
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                if await wait_event(event, min(remaining, self._poll_interval)):
                    return True
        finally:
            self._waiters.unregister(agent_id, event)

    async def heartbeat(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID | None,
        lease_seconds: int | None,
        agent_scope: UUID | None = None,
    ) -> Heartbeat:
        check_lease(lease_seconds)
        params = {
            "job_id": str(job_id),
            "workspace_id": str(workspace_id),
            "claim_id": _id(claim_id),
            "lease_seconds": lease_seconds,
            "agent_scope": _id(agent_scope),
        }

        def run(conn: sqlite3.Connection) -> Row:
            # One UPDATE, its own transaction; the lookup runs only when it touched nothing.
            row = _one(conn, Q["heartbeat"], params)
            if row is not None:
                return row
            raise heartbeat_failure(_one(conn, Q["job_claim_state"], params))

        return heartbeat_from_row(await self._run(run))

    async def update_status(
        self,
        workspace_id: UUID,
        job_id: UUID,
        status: JobStatus,
        *,
        claim_id: UUID | None,
        message: str | None,
        external_id: str | None,
        metadata: dict[str, Any] | None,
        agent_scope: UUID | None = None,
        require_claim_id: bool = False,
    ) -> Job:
        params = {
            "job_id": str(job_id),
            "workspace_id": str(workspace_id),
            "claim_id": _id(claim_id),
            "agent_scope": _id(agent_scope),
        }

        def run(conn: sqlite3.Connection) -> Row:
            with self._write(conn, Q["lock_job"]):
                row: Row | None = _one(conn, Q["status_context"], params)
                if row is None:
                    raise NotFound("job not found")
                verdict = decide_status_change(
                    StatusContext.from_row(row),
                    status,
                    claim_id=claim_id,
                    agent_scope=agent_scope,
                    require_claim_id=require_claim_id,
                )
                if verdict == "noop":
                    return row
                apply = {
                    "job_id": str(job_id),
                    "status": status.value,
                    "message": message,
                    "external_id": external_id,
                    # Merged here, under the write lock, so concurrent updates lose no key.
                    "metadata": dump_json(merge_metadata(row["metadata"], metadata)),
                    "terminal": status in TERMINAL_STATUSES,
                    "outcome": attempt_outcome_for(status),
                }
                updated = _the(conn, Q["apply_status"], apply)
                if status != JobStatus.IN_PROGRESS:
                    # Any status away from inProgress ends the lease and the attempt.
                    apply["now"] = updated["updated_at"]
                    conn.execute(Q["apply_status_release_claim"], apply)
                    conn.execute(Q["apply_status_close_attempt"], apply)
                return updated

        row = await self._run(run)
        job = job_from_row(row)
        if job.status == JobStatus.QUEUED and job.agent_id is not None:
            self._waiters.notify(job.agent_id)
        return job

    async def reap(self, batch_size: int, max_reclaims: int) -> ReapResult:
        def one_batch(conn: sqlite3.Connection) -> tuple[int, list[Row]]:
            with self._write(conn):
                expired: list[Row] = conn.execute(Q["reap"], {"batch_size": batch_size}).fetchall()
                if not expired:
                    return 0, []
                step = {
                    "expired": json.dumps([[r["job_id"], r["attempt"]] for r in expired]),
                    "max_reclaims": max_reclaims,
                    "now": expired[0]["now"],
                }
                conn.execute(Q["reap_close_attempts"], step)
                flipped: list[Row] = conn.execute(Q["reap_flip_jobs"], step).fetchall()
                return len(expired), flipped

        requeued = failed = 0
        while True:
            reaped, flipped = await self._run(one_batch)
            if reaped == 0:
                break
            for row in flipped:
                if row["status"] == JobStatus.QUEUED.value:
                    requeued += 1
                    self._waiters.notify(UUID(row["job_agent_id"]))
                else:
                    failed += 1
        return ReapResult(requeued=requeued, failed=failed)

    async def list_claims(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        state: str,
        limit: int,
        offset: int,
    ) -> tuple[list[JobClaim], int]:
        if state not in CLAIM_STATES:
            raise ValidationError(f"state must be one of {', '.join(sorted(CLAIM_STATES))}")
        params = {
            "workspace_id": str(workspace_id),
            "agent_id": _id(agent_id),
            "state": state,
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._run(lambda conn: self._page(conn, Q["list_claims"], params))
        return [claim_from_row(row) for row in rows], total

    async def list_attempts(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> list[JobAttempt]:
        params = {
            "job_id": str(job_id),
            "workspace_id": str(workspace_id),
            "agent_scope": _id(agent_scope),
        }

        def run(conn: sqlite3.Connection) -> list[Row]:
            rows: list[Row] = conn.execute(Q["list_attempts"], params).fetchall()
            return rows

        rows = await self._run(run)
        if not rows:
            raise NotFound("job not found")
        return [attempt_from_row(row) for row in rows if row["attempt"] is not None]

    async def claim_stats(self) -> dict[str, float]:
        def run(conn: sqlite3.Connection) -> Row:
            return _the(conn, Q["claim_stats"])

        row = await self._run(run)
        return {key: float(value or 0) for key, value in row.items()}
