"""The server's PostgreSQL connector as it was over psycopg 3 (until issue 24 swapped the
driver to asyncpg), kept as the peer of the driver A/B (``benchmarks.driver_ab``): the same
``Connector`` protocol over the same named SQL, a psycopg pool, the status update without a
claim id pipelined in two round trips. Not the server's: it keeps one driver (asyncpg).

The statements the asyncpg connector no longer names (the listener's LISTEN, the statement
timeout set on each new connection, the claim row's lock as it was) are written here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar
from uuid import UUID

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
    NotFound,
    ServerError,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.server.store.connector import Decide, Params, Row
from jobagentctl.server.store.queries import NOTIFY_CHANNEL, load_queries, migrations
from jobagentctl.server.store.schema_window import compat_of
from jobagentctl.server.store.waiters import Waiters

__all__ = ["PsycopgConnector", "translate_error"]

# The claim row's lock without the note the asyncpg connector's simple-protocol check reads.
LOCK_CLAIM = "SELECT c.job_id FROM job_claim AS c WHERE c.job_id = %(job_id)s FOR UPDATE"
LISTEN = f"LISTEN {NOTIFY_CHANNEL}"
SET_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %(ms)s, false)"


class _ClaimAppeared(Exception):
    """The locked path found a claim row that it holds no lock on: start again."""


log = logging.getLogger(__name__)

Q = load_queries("postgres")
Conn = psycopg.AsyncConnection[DictRow]
T = TypeVar("T")


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


class PsycopgConnector:
    """``Connector`` on PostgreSQL (≥ 13) through psycopg."""

    dialect = "postgres"
    merges_json = True  # jsonb || jsonb

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 2,
        max_size: int = 16,
        pool_timeout: float | None = None,
        poll_interval: float = 1.0,
        listen: bool = True,
        statement_timeout: float | None = 5.0,
    ) -> None:
        """``statement_timeout`` (seconds, None = unbounded) bounds every operation, waiting
        for a pooled connection included: past it the caller gets ``ServerUnavailable`` (503)
        at once, even if the database has frozen; it is also the server-side
        ``statement_timeout``. ``pool_timeout`` (opening the pool, waiting for a connection)
        defaults to it, or 10 s when unbounded. Migrations are never bounded."""
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
        self._statement_timeout = statement_timeout
        self._pool_timeout = pool_timeout or statement_timeout or 10.0
        # Operations given up on at the timeout, still unwinding (psycopg cancels the query,
        # then may wait for the server): kept referenced until they finish.
        self._abandoned: set[asyncio.Task[Any]] = set()
        # While LISTEN is down, one poller re-checks the queue of every agent with waiters this
        # often (one query a tick for all of them, not one per waiter).
        self._poll_interval = poll_interval
        self._listen = listen
        self.pool: AsyncConnectionPool[Conn] | None = None
        self.waiters = Waiters()
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        pool = self.pool
        if pool is None:
            raise ServerUnavailable("the PostgreSQL store is not open")
        try:
            async with pool.connection() as conn:
                yield conn
        except JobAgentError:
            raise
        except psycopg.Error as exc:
            raise translate_error(exc) from exc

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool (waiting for its first connections), the listener and the poller."""
        if self.pool is not None:
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
            configure=self._configure,
        )
        try:
            await pool.open(wait=True, timeout=self._pool_timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            await pool.close()
            raise ServerUnavailable("cannot connect to the PostgreSQL database") from exc
        self.pool = pool
        if self._listen:
            self._listener = asyncio.create_task(self._listen_forever(), name="jobagentctl-listen")
        self.waiters.start_poller(self._poll_interval, self._queued_counts)

    async def _configure(self, conn: Conn) -> None:
        # The database gives up on a statement (a lock wait, say) when we do.
        if self._statement_timeout is not None:
            ms = max(1, round(self._statement_timeout * 1000))
            await conn.execute(SET_STATEMENT_TIMEOUT, {"ms": str(ms)})

    async def _bounded(self, operation: Coroutine[Any, Any, T]) -> T:
        """``operation`` within ``statement_timeout``. On timeout the caller is answered at
        once; the operation is cancelled in the background (psycopg's cancellation of a query
        on a frozen server can take seconds more: nobody waits for it)."""
        if self._statement_timeout is None:
            return await operation
        task = asyncio.ensure_future(operation)
        try:
            done, _ = await asyncio.wait((task,), timeout=self._statement_timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._forget)
        raise ServerUnavailable(f"the database did not answer within {self._statement_timeout:g} s")

    @property
    def abandoned(self) -> int:
        """Operations answered as timed out whose queries are still being cancelled: until
        this is 0, one of them may yet take a lock it was waiting for."""
        return len(self._abandoned)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: it was answered as a timeout already

    async def close(self) -> None:
        """Stop the listener and the poller, close the pool."""
        listener, pool = self._listener, self.pool
        self._listener = self.pool = None
        if listener is not None:
            listener.cancel()
            with suppress(asyncio.CancelledError):
                await listener
        await self.waiters.stop_poller()
        if pool is not None:
            await pool.close()

    async def _listen_forever(self) -> None:
        """One dedicated LISTEN connection (not from the pool), re-opened when it drops."""
        backoff = 0.2
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **self._listener_kwargs
                )
                async with conn:
                    await conn.execute(LISTEN)
                    self._listening.set()
                    # Anything queued since the poller's last look went unheard.
                    await self._catch_up()
                    backoff = 0.2
                    while True:
                        async for note in conn.notifies(timeout=30.0):
                            # "<agent>" (one job) or "<agent>:<jobs>" (a reaper batch)
                            agent, _, jobs = note.payload.partition(":")
                            try:
                                self.waiters.notify(UUID(agent), int(jobs or 1))
                            except ValueError:
                                continue
                        # Quiet for a while: make sure the connection is still alive.
                        await conn.execute(Q["ping"])
            except asyncio.CancelledError:
                self._listening.clear()
                raise
            except Exception as exc:  # the listener must outlive any failure: log, retry
                log.warning("LISTEN connection lost (%s); reconnecting", type(exc).__name__)
            # Until it is back, the poller asks for the waiters (one query per tick, not one
            # per waiter, and no wake-up of every waiter: each would run a claim).
            self._listening.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _catch_up(self) -> None:
        """Wake as many waiters as jobs are queued for their agents; if the database cannot
        say, every waiter (each then checks for itself)."""
        agents = list(self.waiters)
        if not agents:
            return
        try:
            counts = await self._counts(agents)
        except JobAgentError:
            self.waiters.notify_all()
            return
        self.waiters.ensure_all(counts)

    async def _queued_counts(self, agents: list[UUID]) -> dict[UUID, int]:
        """The poller's question, asked only while LISTEN is down (notifications do the rest)."""
        return {} if self.listening else await self._counts(agents)

    async def _counts(self, agents: list[UUID]) -> dict[UUID, int]:
        cap = max(self.waiters.waiting(agent) for agent in agents)
        rows = await self.all("queued_counts", {"agents": agents, "cap": cap})
        return {row["job_agent_id"]: int(row["jobs"]) for row in rows}

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up (long-polls are then woken, not polled)."""
        return self._listening.is_set()

    async def migrate(self) -> list[int]:
        """Apply pending migrations in one transaction, after any other replica's (an advisory
        lock); never bounded by ``statement_timeout``."""
        applied_now: list[int] = []
        async with self._connection() as conn, conn.transaction():
            await conn.execute(Q["unbounded"])  # a migration may rewrite big tables
            await conn.execute(Q["migrate_lock"])
            await conn.execute(Q["migrations_table"])
            cur = await conn.execute(Q["compat_column"])
            if not (await cur.fetchone() or {}).get("found"):
                await conn.execute(Q["add_compat_column"])
            cur = await conn.execute(Q["applied_versions"])
            done = {row["version"] for row in await cur.fetchall()}
            for version, script in migrations(self.dialect):
                if version not in done:
                    # A multi-statement script without parameters: simple query protocol.
                    await conn.execute(script.encode(), prepare=False)
                    compat = compat_of(script)
                    record = {"version": version, "compat": compat and compat.value}
                    await conn.execute(Q["record_migration"], record)
                    applied_now.append(version)
        return applied_now

    # --- queries -------------------------------------------------------------------------------

    async def one(self, name: str, params: Params | None = None) -> Row | None:
        """The first row of statement ``name``, within ``statement_timeout``."""
        return await self._bounded(self._one(name, params))

    async def _one(self, name: str, params: Params | None) -> Row | None:
        async with self._connection() as conn:
            cur = await conn.execute(Q[name], params)
            return await cur.fetchone() if cur.description else None

    async def all(self, name: str, params: Params | None = None) -> list[Row]:
        """Every row of statement ``name``, within ``statement_timeout``."""
        return await self._bounded(self._all(name, params))

    async def _all(self, name: str, params: Params | None) -> list[Row]:
        async with self._connection() as conn:
            cur = await conn.execute(Q[name], params)
            return list(await cur.fetchall())

    async def each(self, name: str, params: Callable[[], Params], limit: int) -> list[Row]:
        """The rows of one statement that claims the whole batch (``limit`` bound)."""
        return await self.all(name, {**params(), "limit": limit})

    async def locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        """One pipelined transaction locking the claim row, then the job row (every writer's
        order), within ``statement_timeout``."""
        return await self._bounded(self._locked(read, params, decide))

    async def _locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        while True:
            try:
                return await self._locked_once(read, params, decide)
            except _ClaimAppeared:
                continue  # rolled back, nothing written: take the locks again, in order

    async def _locked_once(self, read: str, params: Params, decide: Decide) -> Row | None:
        error: JobAgentError | None = None
        written: psycopg.AsyncCursor[DictRow] | None = None
        async with self._connection() as conn:
            try:
                # One transaction in two round trips: BEGIN, the locks and the read leave
                # together (the fetch flushes them); the write and COMMIT leave together when
                # the pipeline ends. (psycopg's transaction() would wait on BEGIN and on COMMIT.)
                # The locks come in the order of every waiting writer: the claim row, then the
                # job row (finish_claimed deletes the claim, then updates the job; the reaper
                # skips locked rows), so no two of them deadlock. The job's lock is its own
                # statement so that the read (a new snapshot) sees the claim row as it is now.
                async with conn.pipeline():
                    await conn.execute(b"BEGIN")
                    claim_lock = await conn.execute(LOCK_CLAIM, params)
                    await conn.execute(Q["lock_job"], params)
                    cur = await conn.execute(Q[read], params)
                    row = await cur.fetchone()
                    if (
                        await claim_lock.fetchone() is None
                        and row is not None
                        and row.get("current_claim_id") is not None
                    ):
                        # A claim committed between the two locks: its row is not locked by
                        # us, and deleting it now would take the locks out of order.
                        raise _ClaimAppeared
                    try:
                        write = decide(row)
                    except JobAgentError as exc:
                        error, write = exc, None
                    if write is not None:
                        written = await conn.execute(Q[write[0]], write[1])
                    # Nothing was written on the other paths: COMMIT just ends the lock.
                    await conn.execute(b"COMMIT")
            except BaseException:
                # A refused value or a cancellation: hand the pooled connection back idle.
                with suppress(psycopg.Error):
                    if conn.info.transaction_status != TransactionStatus.IDLE:
                        await conn.execute(b"ROLLBACK")
                raise
            if written is not None:
                row = await written.fetchone()
        if error is not None:
            raise error
        return row

    async def writable(self) -> bool:
        """Always: a failing write on PostgreSQL fails its request; reachability is readiness
        enough."""
        return True

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """Nothing to do here: the statement that queued the jobs also ran pg_notify, which
        reaches this replica's listener and every other one at commit, in no extra round trip."""
