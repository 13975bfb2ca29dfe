"""The PostgreSQL store: for production, shared by any number of server replicas.

psycopg 3 async over a connection pool. Each lease operation is one statement (claim, heartbeat,
reap batch) or one pipelined transaction (status update); long-polls wake through LISTEN/NOTIFY,
so a job queued on one replica wakes the agents waiting on another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from uuid import UUID, uuid4

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from jobagentctl.errors import (
    ConfigError,
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
    migrations,
    wait_event,
)
from jobagentctl.server.store.base import ApiKeyRecord, ReapResult

__all__ = ["PostgresStore"]

log = logging.getLogger(__name__)

Q = load_queries("postgres")
Conn = psycopg.AsyncConnection[DictRow]


def translate_error(exc: psycopg.Error) -> JobAgentError:
    """The one place psycopg's errors become the project's. Messages never carry SQL, values
    or the connection string (it may hold a password)."""
    if isinstance(exc, PoolTimeout):
        return ServerUnavailable("the database is busy: no connection available in time")
    if isinstance(exc, pg_errors.UndefinedTable):
        return ServerUnavailable("the database schema is not migrated (run: server migrate)")
    if isinstance(exc, pg_errors.DataError):
        # Values the models let through but PostgreSQL refuses (e.g. \u0000 in text or JSON).
        return ValidationError("a value was refused by the database (invalid text or JSON)")
    if isinstance(exc, pg_errors.ForeignKeyViolation):
        return NotFound("a referenced workspace or job agent does not exist")
    if isinstance(exc, pg_errors.UniqueViolation):
        return Conflict("the object already exists")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return ServerUnavailable("the database is unavailable")
    return ServerError("unexpected database error")


class PostgresStore:
    """``Store`` on PostgreSQL (≥ 13)."""

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 2,
        max_size: int = 16,
        pool_timeout: float = 10.0,
        poll_interval: float = 1.0,
        listen: bool = True,
    ) -> None:
        self._url = url  # never logged: it may carry a password
        # Name our sessions in pg_stat_activity unless the operator's URL already does.
        try:
            named = "application_name" in conninfo_to_dict(url)
        except psycopg.Error as exc:  # libpq's message may quote the URL, password included
            raise ConfigError("the PostgreSQL database URL cannot be parsed") from exc
        self._pool_kwargs: dict[str, Any] = {} if named else {"application_name": "jobagentctl"}
        self._listener_kwargs: dict[str, Any] = (
            {} if named else {"application_name": "jobagentctl-listener"}
        )
        self._min_size = min_size
        self._max_size = max_size
        self._pool_timeout = pool_timeout
        # Long-polls fall back to re-checking the queue this often while LISTEN is down.
        self._poll_interval = poll_interval
        self._listen = listen
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._waiters = Waiters()
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    # --- plumbing ------------------------------------------------------------------------------

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        pool = self._pool
        if pool is None:
            raise ServerUnavailable("the PostgreSQL store is not open")
        try:
            async with pool.connection() as conn:
                yield conn
        except JobAgentError:
            raise
        except psycopg.Error as exc:
            raise translate_error(exc) from exc

    async def _one(self, query: str, params: dict[str, Any] | None = None) -> DictRow | None:
        async with self._connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def _exec(self, query: str, params: dict[str, Any] | None = None) -> None:
        async with self._connection() as conn:
            await conn.execute(query, params)

    async def _all(self, query: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        async with self._connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def _page(self, query: str, params: dict[str, Any]) -> tuple[list[DictRow], int]:
        rows = await self._all(query, params)
        if rows:
            return rows, int(rows[0]["total"])
        if params["offset"] == 0:
            return [], 0
        # Past the end: the window count needs one row to ride on.
        first = await self._all(query, {**params, "offset": 0, "limit": 1})
        return [], int(first[0]["total"]) if first else 0

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        if self._pool is not None:
            return
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._url,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=self._pool_timeout,
            open=False,
            name="jobagentctl",
            connection_class=psycopg.AsyncConnection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row, **self._pool_kwargs},
        )
        try:
            await pool.open(wait=True, timeout=self._pool_timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            await pool.close()
            raise ServerUnavailable("cannot connect to the PostgreSQL database") from exc
        self._pool = pool
        if self._listen:
            self._listener = asyncio.create_task(self._listen_forever(), name="jobagentctl-listen")

    async def close(self) -> None:
        listener, pool = self._listener, self._pool
        self._listener = None
        self._pool = None
        if listener is not None:
            listener.cancel()
            with suppress(asyncio.CancelledError):
                await listener
        if pool is not None:
            await pool.close()
        self._waiters.notify_all()

    async def _listen_forever(self) -> None:
        """One dedicated LISTEN connection (not from the pool), re-opened when it drops."""
        backoff = 0.2
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **self._listener_kwargs
                )
                async with conn:
                    await conn.execute(Q["listen"])
                    self._listening.set()
                    # Anything queued while we were away went unheard: let every waiter look.
                    self._waiters.notify_all()
                    backoff = 0.2
                    while True:
                        async for note in conn.notifies(timeout=30.0):
                            try:
                                self._waiters.notify(UUID(note.payload))
                            except ValueError:
                                continue
                        # Quiet for a while: make sure the connection is still alive.
                        await conn.execute(Q["ping"])
            except asyncio.CancelledError:
                self._listening.clear()
                raise
            except Exception as exc:  # the listener must outlive any failure: log, retry
                log.warning("LISTEN connection lost (%s); reconnecting", type(exc).__name__)
            self._listening.clear()
            self._waiters.notify_all()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up (long-polls are then woken, not polled)."""
        return self._listening.is_set()

    async def migrate(self) -> list[int]:
        applied_now: list[int] = []
        async with self._connection() as conn, conn.transaction():
            await conn.execute(Q["migrate_lock"])
            await conn.execute(Q["migrations_table"])
            cur = await conn.execute(Q["applied_versions"])
            done = {row["version"] for row in await cur.fetchall()}
            for version, script in migrations("postgres"):
                if version in done:
                    continue
                # A multi-statement script without parameters: simple query protocol.
                await conn.execute(script.encode(), prepare=False)
                await conn.execute(Q["record_migration"], {"version": version})
                applied_now.append(version)
        return applied_now

    async def schema_current(self) -> bool:
        try:
            rows = await self._all(Q["applied_versions"])
        except JobAgentError:
            return False
        done = {row["version"] for row in rows}
        return all(version in done for version, _ in migrations("postgres"))

    # --- workspaces and keys -------------------------------------------------------------------

    async def create_workspace(self, name: str) -> UUID:
        workspace_id = uuid4()
        await self._exec(Q["create_workspace"], {"id": workspace_id, "name": name})
        return workspace_id

    async def workspace_exists(self, workspace_id: UUID) -> bool:
        return await self._one(Q["workspace_exists"], {"id": workspace_id}) is not None

    async def create_api_key(
        self, workspace_id: UUID, job_agent_id: UUID | None, prefix: str, secret_hash: str
    ) -> UUID:
        key_id = uuid4()
        params = {
            "id": key_id,
            "workspace_id": workspace_id,
            "job_agent_id": job_agent_id,
            "prefix": prefix,
            "secret_hash": secret_hash,
        }
        try:
            row = await self._one(Q["create_api_key"], params)
        except Conflict as exc:
            raise Conflict("an API key with this prefix already exists") from exc
        if row is None:
            raise NotFound("workspace or job agent not found")
        return key_id

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        row = await self._one(Q["get_api_key"], {"prefix": prefix})
        return None if row is None else api_key_from_row(row)

    async def revoke_api_key(self, key_id: UUID) -> bool:
        return await self._one(Q["revoke_api_key"], {"id": key_id}) is not None

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
            "id": agent_id,
            "workspace_id": workspace_id,
            "name": name,
            "type": type,
            "config": dump_json(config),
            "metadata": None if metadata is None else dump_json(metadata),
        }
        try:
            row = await self._one(Q["upsert_agent"], params)
        except NotFound as exc:  # the foreign key: unknown workspace
            raise NotFound("workspace not found") from exc
        if row is None:
            raise NotFound("job agent not found")
        return agent_from_row(row)

    async def get_agent(self, workspace_id: UUID, agent_id: UUID) -> JobAgent | None:
        row = await self._one(Q["get_agent"], {"id": agent_id, "workspace_id": workspace_id})
        return None if row is None else agent_from_row(row)

    async def list_agents(
        self, workspace_id: UUID, limit: int, offset: int
    ) -> tuple[list[JobAgent], int]:
        params = {"workspace_id": workspace_id, "limit": limit, "offset": offset}
        rows, total = await self._page(Q["list_agents"], params)
        return [agent_from_row(row) for row in rows], total

    async def delete_agent(self, workspace_id: UUID, agent_id: UUID) -> bool:
        params = {"id": agent_id, "workspace_id": workspace_id}
        return await self._one(Q["delete_agent"], params) is not None

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
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "job_agent_config": None if job_agent_config is None else dump_json(job_agent_config),
            "dispatch_context": dump_json(dispatch_context or {}),
            "metadata": dump_json(metadata or {}),
        }
        row = await self._one(Q["create_job"], params)
        if row is None:
            raise NotFound("job agent not found")
        return job_from_row(row)

    async def get_job(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> Job | None:
        params = {"job_id": job_id, "workspace_id": workspace_id, "agent_scope": agent_scope}
        row = await self._one(Q["get_job"], params)
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
            "workspace_id": workspace_id,
            "agent_id": agent_id,
            "statuses": None if statuses is None else [s.value for s in statuses],
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._page(Q["list_jobs"], params)
        return [job_from_row(row, include_dispatch_context) for row in rows], total

    # --- leases --------------------------------------------------------------------------------

    async def _claim(self, query: str, params: dict[str, Any]) -> DictRow | None:
        for retry in (True, False):
            try:
                return await self._one(query, params)
            except Conflict as exc:
                # The attempt number comes from the statement's snapshot: a claim, release and
                # re-claim of this job racing within our statement can take it first (primary
                # key violation, nothing written). A fresh statement sees the new maximum.
                if not (retry and isinstance(exc.__cause__, pg_errors.UniqueViolation)):
                    raise
        raise AssertionError("unreachable")

    async def claim_job(
        self, workspace_id: UUID, agent_id: UUID, job_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob:
        check_lease(lease_seconds)
        params = {
            "job_id": job_id,
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "lease_seconds": lease_seconds,
            "agent_scope": agent_id,
        }
        row = await self._claim(Q["claim_job"], params)
        if row is not None:
            return claimed_job_from_row(row)
        # Failure path only: tell unknown/foreign (404) from not queued (409).
        state = await self._one(Q["job_claim_state"], params)
        if state is None:
            raise NotFound("job not found")
        raise NotClaimable(
            f"the job is {state['status']}, not queued", details={"jobStatus": state["status"]}
        )

    async def claim_next(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob | None:
        check_lease(lease_seconds)
        params = {
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "lease_seconds": lease_seconds,
        }
        row = await self._claim(Q["claim_next"], params)
        return None if row is None else claimed_job_from_row(row)

    async def wait_for_job(self, agent_id: UUID, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self._waiters.register(agent_id)
        try:
            while True:
                # Checked after registering, so a job queued since the caller's claim attempt
                # is never missed between that attempt and the NOTIFY.
                if await self._one(Q["queued_exists"], {"agent_id": agent_id}) is not None:
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                step = remaining if self.listening else min(remaining, self._poll_interval)
                if await wait_event(event, step):
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
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "lease_seconds": lease_seconds,
            "agent_scope": agent_scope,
        }
        row = await self._one(Q["heartbeat"], params)
        if row is not None:
            return heartbeat_from_row(row)
        raise heartbeat_failure(await self._one(Q["job_claim_state"], params))

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
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "agent_scope": agent_scope,
        }
        apply = {
            "job_id": job_id,
            "status": status.value,
            "message": message,
            "external_id": external_id,
            "metadata": None if metadata is None else dump_json(metadata),
            "terminal": status in TERMINAL_STATUSES,
            "outcome": attempt_outcome_for(status),
        }
        error: JobAgentError | None = None
        applied: psycopg.AsyncCursor[DictRow] | None = None
        async with self._connection() as conn:
            try:
                # One transaction in two round trips: BEGIN, the lock and the read leave
                # together (the fetch flushes them); the write and COMMIT leave together when
                # the pipeline ends. (psycopg's transaction() would wait on BEGIN and on COMMIT.)
                async with conn.pipeline():
                    await conn.execute(b"BEGIN")
                    await conn.execute(Q["lock_job"], params)
                    cur = await conn.execute(Q["status_context"], params)
                    row = await cur.fetchone()
                    try:
                        if row is None:
                            raise NotFound("job not found")
                        verdict = decide_status_change(
                            StatusContext.from_row(row),
                            status,
                            claim_id=claim_id,
                            agent_scope=agent_scope,
                            require_claim_id=require_claim_id,
                        )
                    except JobAgentError as exc:
                        error, verdict = exc, "noop"
                    if verdict == "apply":
                        applied = await conn.execute(Q["apply_status"], apply)
                    # Nothing was written on the other paths: COMMIT just ends the lock.
                    await conn.execute(b"COMMIT")
            except BaseException:
                # A refused value or a cancellation: hand the pooled connection back idle.
                with suppress(psycopg.Error):
                    if conn.info.transaction_status != TransactionStatus.IDLE:
                        await conn.execute(b"ROLLBACK")
                raise
            if applied is not None:
                row = await applied.fetchone()
        if error is not None:
            raise error
        if row is None:  # pragma: no cover - the job row was locked by us
            raise NotFound("job not found")
        return job_from_row(row)

    async def reap(self, batch_size: int, max_reclaims: int) -> ReapResult:
        params = {"batch_size": batch_size, "max_reclaims": max_reclaims}
        requeued = failed = 0
        while True:
            row = await self._one(Q["reap"], params)
            if row is None or row["reaped"] == 0:
                break
            requeued += int(row["requeued"])
            failed += int(row["failed"])
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
            "workspace_id": workspace_id,
            "agent_id": agent_id,
            "state": state,
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._page(Q["list_claims"], params)
        return [claim_from_row(row) for row in rows], total

    async def list_attempts(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> list[JobAttempt]:
        params = {"job_id": job_id, "workspace_id": workspace_id, "agent_scope": agent_scope}
        rows = await self._all(Q["list_attempts"], params)
        if not rows:
            raise NotFound("job not found")
        return [attempt_from_row(row) for row in rows if row["attempt"] is not None]

    async def claim_stats(self) -> dict[str, float]:
        row = await self._one(Q["claim_stats"])
        return {key: float(value or 0) for key, value in (row or {}).items()}
