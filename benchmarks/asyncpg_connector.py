"""An asyncpg ``Connector`` for the driver A/B (``benchmarks.driver_ab``): the same protocol and
the same named SQL as ``server/store/postgres.py`` (psycopg), with psycopg's ``%(name)s``
parameters converted to asyncpg's ``$n`` once, at load time.

It carries the production connector's behaviours (statement timeout answered at once,
pool timeout, one error translation, LISTEN/NOTIFY with the poller behind it, the advisory-locked
migrations, the locked status path) so that the figure compares like with like; it is not the
server's connector (the project keeps one driver per database: see docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from functools import cache
from typing import Any, TypeVar, cast
from uuid import UUID

import asyncpg

from jobagentctl.errors import (
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

log = logging.getLogger(__name__)
T = TypeVar("T")

_PARAM = re.compile(r"%\(([a-z_][a-z0-9_]*)\)s|%%")


class _ClaimAppeared(Exception):
    """The locked path found a claim row that it holds no lock on: start again."""


def to_dollar(sql: str) -> tuple[str, tuple[str, ...]]:
    """psycopg's ``%(name)s`` → ``$n`` (one number per name, casts kept), and the names in
    ``$n`` order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql), tuple(names)


@cache
def queries() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every named statement of ``sql/postgres/queries.sql``, converted once."""
    return {name: to_dollar(sql) for name, sql in load_queries("postgres").items()}


def _args(name: str, params: Params | None) -> tuple[str, list[Any]]:
    sql, names = queries()[name]
    given = params or {}
    return sql, [given[key] for key in names]


def translate_error(exc: BaseException) -> JobAgentError:
    """The one place asyncpg's errors become the project's (no SQL, values or URL)."""
    if isinstance(exc, TimeoutError):
        return ServerUnavailable("the database is busy: no connection available in time")
    if isinstance(exc, asyncpg.UndefinedTableError):
        return ServerUnavailable("the database schema is not migrated (run: server migrate)")
    if isinstance(exc, asyncpg.DataError | asyncpg.CharacterNotInRepertoireError):
        return ValidationError("a value was refused by the database (invalid text or JSON)")
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return NotFound("a referenced workspace or job agent does not exist")
    if isinstance(exc, asyncpg.UniqueViolationError):
        return Conflict("the object already exists")
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | asyncpg.QueryCanceledError
        | OSError,
    ):
        return ServerUnavailable("the database is unavailable")
    return ServerError("unexpected database error")


_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


async def _fetchrow(conn: asyncpg.Connection, name: str, params: Params | None) -> Row | None:
    sql, args = _args(name, params)
    return cast(Row | None, await conn.fetchrow(sql, *args))


async def _init(conn: asyncpg.Connection) -> None:
    # JSON as psycopg reads it (parsed); parameters arrive already dumped (rows.dump_json).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=str, decoder=json.loads, schema="pg_catalog")


async def _reset(conn: asyncpg.Connection) -> None:
    # No session state outlives an operation (no LISTEN, cursor or session lock on pooled
    # connections): only an open transaction is rolled back, no reset round trip.
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class AsyncpgConnector:
    """``Connector`` on PostgreSQL through asyncpg (see the module's docstring)."""

    dialect = "postgres"
    merges_json = True

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
        """As ``PostgresConnector``."""
        self._url = url
        self._min_size = min_size
        self._max_size = max_size
        self._statement_timeout = statement_timeout
        self._pool_timeout = pool_timeout or statement_timeout or 10.0
        self._settings = {"application_name": "jobagentctl"}
        if statement_timeout is not None:
            self._settings["statement_timeout"] = str(max(1, round(statement_timeout * 1000)))
        self._abandoned: set[asyncio.Task[Any]] = set()
        self._poll_interval = poll_interval
        self._listen = listen
        self.pool: asyncpg.Pool | None = None
        self.waiters = Waiters()
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        pool = self.pool
        if pool is None:
            raise ServerUnavailable("the PostgreSQL store is not open")
        try:
            async with pool.acquire(timeout=self._pool_timeout) as conn:
                yield conn
        except JobAgentError:
            raise
        except _DRIVER_ERRORS as exc:
            raise translate_error(exc) from exc

    async def open(self) -> None:
        """Open the pool, the listener and the poller."""
        if self.pool is not None:
            return
        try:
            pool = await asyncio.wait_for(
                asyncpg.create_pool(
                    self._url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    init=_init,
                    reset=_reset,
                    server_settings=self._settings,
                ),
                self._pool_timeout,
            )
        except _DRIVER_ERRORS as exc:
            raise ServerUnavailable("cannot connect to the PostgreSQL database") from exc
        self.pool = pool
        if self._listen:
            self._listener = asyncio.create_task(self._listen_forever(), name="jobagentctl-listen")
        self.waiters.start_poller(self._poll_interval, self._queued_counts)

    async def _bounded(self, operation: Coroutine[Any, Any, T]) -> T:
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
        """Operations answered as timed out whose queries are still being cancelled."""
        return len(self._abandoned)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()

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
            try:
                await asyncio.wait_for(pool.close(), self._pool_timeout)
            except TimeoutError:
                pool.terminate()

    async def _listen_forever(self) -> None:
        backoff = 0.2
        while True:
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(
                    self._url, server_settings={"application_name": "jobagentctl-listener"}
                )
                try:
                    conn.add_termination_listener(lambda _, event=lost: event.set())
                    await conn.add_listener(NOTIFY_CHANNEL, self._heard)
                    self._listening.set()
                    await self._catch_up()
                    backoff = 0.2
                    while True:
                        with suppress(TimeoutError):
                            await asyncio.wait_for(lost.wait(), 30.0)
                        if lost.is_set():
                            raise ConnectionError("LISTEN connection closed")
                        await conn.fetchval(queries()["ping"][0], timeout=10.0)
                finally:
                    conn.terminate()
            except asyncio.CancelledError:
                self._listening.clear()
                raise
            except Exception as exc:
                log.warning("LISTEN connection lost (%s); reconnecting", type(exc).__name__)
            self._listening.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _heard(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        agent, _, jobs = payload.partition(":")
        with suppress(ValueError):
            self.waiters.notify(UUID(agent), int(jobs or 1))

    async def _catch_up(self) -> None:
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
        return {} if self.listening else await self._counts(agents)

    async def _counts(self, agents: list[UUID]) -> dict[UUID, int]:
        cap = max(self.waiters.waiting(agent) for agent in agents)
        rows = await self.all("queued_counts", {"agents": agents, "cap": cap})
        return {row["job_agent_id"]: int(row["jobs"]) for row in rows}

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._listening.is_set()

    async def migrate(self) -> list[int]:
        """Pending migrations in one transaction behind an advisory lock, unbounded."""
        applied_now: list[int] = []
        q = queries()
        async with self._connection() as conn, conn.transaction():
            await conn.execute(q["unbounded"][0])
            await conn.execute(q["migrate_lock"][0])
            await conn.execute(q["migrations_table"][0])
            if not await conn.fetchval(q["compat_column"][0]):
                await conn.execute(q["add_compat_column"][0])
            done = {row["version"] for row in await conn.fetch(q["applied_versions"][0])}
            for version, script in migrations(self.dialect):
                if version not in done:
                    await conn.execute(script)  # no arguments: the simple query protocol
                    compat = compat_of(script)
                    sql, args = _args(
                        "record_migration", {"version": version, "compat": compat and compat.value}
                    )
                    await conn.execute(sql, *args)
                    applied_now.append(version)
        return applied_now

    async def one(self, name: str, params: Params | None = None) -> Row | None:
        """The first row of statement ``name``, within ``statement_timeout``."""
        return await self._bounded(self._one(name, params))

    async def _one(self, name: str, params: Params | None) -> Row | None:
        sql, args = _args(name, params)
        async with self._connection() as conn:
            return cast(Row | None, await conn.fetchrow(sql, *args))

    async def all(self, name: str, params: Params | None = None) -> list[Row]:
        """Every row of statement ``name``, within ``statement_timeout``."""
        return await self._bounded(self._all(name, params))

    async def _all(self, name: str, params: Params | None) -> list[Row]:
        sql, args = _args(name, params)
        async with self._connection() as conn:
            return cast(list[Row], await conn.fetch(sql, *args))

    async def each(self, name: str, params: Callable[[], Params], limit: int) -> list[Row]:
        """The rows of one statement that claims the whole batch."""
        return await self.all(name, {**params(), "limit": limit})

    async def locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        """One transaction locking the claim row, then the job row."""
        return await self._bounded(self._locked(read, params, decide))

    async def _locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        while True:
            try:
                return await self._locked_once(read, params, decide)
            except _ClaimAppeared:
                continue

    async def _locked_once(self, read: str, params: Params, decide: Decide) -> Row | None:
        error: JobAgentError | None = None
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    claim_lock = await _fetchrow(conn, "lock_claim", params)
                    await _fetchrow(conn, "lock_job", params)
                    row = await _fetchrow(conn, read, params)
                    if (
                        claim_lock is None
                        and row is not None
                        and row.get("current_claim_id") is not None
                    ):
                        raise _ClaimAppeared
                    try:
                        write = decide(row)
                    except JobAgentError as exc:
                        error, write = exc, None
                    if write is not None:
                        row = await _fetchrow(conn, *write)
            except _DRIVER_ERRORS as exc:
                raise translate_error(exc) from exc
        if error is not None:
            raise error
        return row

    async def writable(self) -> bool:
        """Always (as the psycopg connector)."""
        return True

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """Nothing: the statement that queued the jobs ran pg_notify."""
