"""The PostgreSQL connector: for production, shared by any number of server replicas.

asyncpg over a connection pool (UUIDs, lists and datetimes adapt natively; the named SQL's
``%(name)s`` parameters become ``$n`` once: ``postgres_sql.py``). Each lease operation is one
statement (claim, heartbeat, reap batch) or one short transaction (status update without the claim
id). Long-polls wake through LISTEN/NOTIFY, so a job queued on one replica wakes the agents waiting
on another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeAlias, TypeVar, cast
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg
from asyncpg.exceptions import _base as asyncpg_base
from asyncpg.pool import PoolConnectionProxy

from jobagentctl.errors import (
    Conflict,
    JobAgentError,
    NotFound,
    ServerError,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.server.store.connector import Decide, Params, Row
from jobagentctl.server.store.postgres_sql import bind, inline, statement
from jobagentctl.server.store.postgres_url import (
    driver_url,
    passfile_password,
    target_of,
    url_options,
)
from jobagentctl.server.store.queries import NOTIFY_CHANNEL, migrations
from jobagentctl.server.store.rows import pg_timestamptz_in, pg_timestamptz_out
from jobagentctl.server.store.schema_window import compat_of
from jobagentctl.server.store.waiters import Waiters

__all__ = ["PostgresConnector", "translate_error"]


class _ClaimAppeared(Exception):
    """The locked path found a claim row that it holds no lock on: start again."""


log = logging.getLogger(__name__)

# asyncpg's classes are generic in its stubs only: the aliases are strings.
Conn: TypeAlias = "asyncpg.Connection[asyncpg.Record]"
Pooled: TypeAlias = "PoolConnectionProxy[asyncpg.Record]"
Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
T = TypeVar("T")

# What the driver raises besides the server's errors: its own (a closed connection, an
# argument it cannot encode, a protocol in a state it did not expect after the connection was
# cut mid-operation: "cannot switch to state …; another operation is in progress"), the
# socket's, and a pool's wait that timed out.
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg_base.InternalClientError,
    OSError,
    TimeoutError,
)
# SQLSTATEs after which the connection is gone: class 08 (connection exception), and operator
# intervention that ends the session (57P01 a terminated backend, 57P02 a crash, 57P03 …) —
# not 57014, a statement cancelled by its timeout, which leaves the session usable.
_CONNECTION_GONE = ("08", "57P")
# SQLSTATE classes of a database that is unavailable for now rather than of a wrong statement
# (connection, transaction rollback such as a deadlock, resources, operator intervention,
# system, configuration file, foreign data): what psycopg called OperationalError.
_UNAVAILABLE = ("08", "27", "28", "2F", "38", "39", "3B", "40", "53", "54", "55", "57", "58")
_UNAVAILABLE_PREFIXES = ("F", "H")
# set_status's locked path, sent at once (simple query protocol): BEGIN, the claim row's lock,
# the job row's lock, then whether a claim row appeared between the two (its tag: SELECT 0|1).
_LOCK_STATEMENTS = ("lock_claim", "lock_job", "claim_appeared")


def why_not_connected(exc: BaseException) -> str:
    """Why a connection could not be made, in a few words on one line. That is the server's own
    message where it sent one (it names the role or database, never a password). Else it is what the
    socket or TLS said."""
    if isinstance(exc, asyncpg.InvalidPasswordError):
        reason = f"wrong password ({exc.args[0] if exc.args else 'authentication failed'})"
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        # An unknown role, or no pg_hba.conf line for it (e.g. SSL required there).
        reason = f"refused by the server: {exc.args[0] if exc.args else exc.sqlstate}"
    elif isinstance(exc, asyncpg.InvalidCatalogNameError):
        reason = f"unknown database ({exc.args[0] if exc.args else 'does not exist'})"
    elif isinstance(exc, asyncpg.PostgresError):
        reason = f"{exc.args[0] if exc.args else type(exc).__name__} (SQLSTATE {exc.sqlstate})"
    elif isinstance(exc, ssl.SSLCertVerificationError):
        reason = f"the server's certificate cannot be verified ({exc.verify_message})"
    elif isinstance(exc, ssl.SSLError):
        reason = f"TLS failed ({exc.reason or exc})"
    elif isinstance(exc, ConnectionRefusedError):
        reason = "connection refused (is PostgreSQL running and listening on that port?)"
    elif isinstance(exc, socket.gaierror):
        reason = f"host name not found ({exc.strerror})"
    elif isinstance(exc, TimeoutError):
        reason = "no answer in time (timeout)"
    elif isinstance(exc, OSError):
        # asyncpg's own ConnectionError carries its text in args ("… rejected SSL upgrade").
        reason = exc.strerror or str(exc) or type(exc).__name__
    else:
        reason = str(exc) or type(exc).__name__
    if "rejected SSL upgrade" in reason:  # asyncpg's words for a server without TLS
        reason = f"SSL required by sslmode, but the server does not offer it ({reason})"
    return " ".join(reason.split())  # one line, whatever the server sent


def _breaks_connection(exc: BaseException) -> bool:
    """True when ``exc`` leaves its connection unusable or in an unknown state. That is everything
    but an error the server answered on a live connection: a constraint, a bad value, a lock
    timeout."""
    if isinstance(exc, asyncpg.PostgresError) and not isinstance(
        exc, asyncpg.PostgresConnectionError
    ):
        return str(exc.sqlstate or "").startswith(_CONNECTION_GONE)
    return not isinstance(exc, asyncpg_base.DataError)  # an argument refused before sending


def _is_connect_refusal(exc: asyncpg.PostgresError) -> bool:
    """An error the server sends instead of a session: authentication, an unknown database,
    too many connections, starting up or shutting down, a connection error."""
    state = str(exc.sqlstate or "")
    return state[:2] in ("08", "28", "53", "57") or state == "3D000"


def translate_error(exc: BaseException) -> JobAgentError:
    """The one place asyncpg's errors become the project's. Messages never carry SQL, values
    or the connection string (it may hold a password)."""
    if isinstance(exc, TimeoutError):
        return ServerUnavailable("the database is busy: no connection available in time")
    if isinstance(exc, asyncpg_base.DataError):  # an argument the driver cannot encode
        return ValidationError("a value was refused by the database (invalid text or JSON)")
    if isinstance(exc, asyncpg.InterfaceError | OSError | asyncpg_base.InternalClientError):
        # The connection was lost or cut mid-operation: the database is unavailable for now.
        return ServerUnavailable(f"the database connection was lost ({type(exc).__name__})")
    state = getattr(exc, "sqlstate", None) or ""
    if state == "42501":
        # A missing GRANT: the server's message names the object ("permission denied for
        # table job"), never a value.
        return ServerUnavailable(
            f"the database role lacks a privilege: {_server_message(exc)} (see "
            "docs/operators.md, database set-up)"
        )
    if state == "42P01":
        return ServerUnavailable("the database schema is not migrated (run: server migrate)")
    if state.startswith("22"):
        # Values the models let through but PostgreSQL refuses (e.g. \u0000 in text or JSON).
        return ValidationError("a value was refused by the database (invalid text or JSON)")
    if state == "23503":
        return NotFound("a referenced workspace or job agent does not exist")
    if state == "23505":
        return Conflict("the object already exists")
    if state[:2] in _UNAVAILABLE or state.startswith(_UNAVAILABLE_PREFIXES):
        # The class, not the server's text (it may quote a value).
        return ServerUnavailable(f"the database is unavailable (SQLSTATE {state})")
    return ServerError(f"unexpected database error (SQLSTATE {state or '?'})")


def _server_message(exc: BaseException) -> str:
    """The server's primary message on one line: PostgreSQL's messages name objects and
    roles, not values (the detail line, which may carry a row's values, is left out)."""
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else type(exc).__name__
    return " ".join(text.split())


class _OneLine(logging.Filter):
    """The driver's own records on one line, as ours are. The pool of asyncpg logs a traceback each
    time it fails to reopen a connection: every few seconds of a database outage. The exception
    becomes the reason at the end of the line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            reason = why_not_connected(record.exc_info[1])
            record.msg = f"{record.getMessage()}: {reason}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_ONE_LINE = _OneLine()
# asyncpg's loggers (a filter on a logger sees only that logger's own records).
_DRIVER_LOGGERS = ("asyncpg", "asyncpg.pool", "asyncpg.connection", "asyncpg.protocol")


def one_line_driver_logs() -> None:
    """Fold the driver's tracebacks into one line (idempotent)."""
    for name in _DRIVER_LOGGERS:
        driver_log = logging.getLogger(name)
        if _ONE_LINE not in driver_log.filters:
            driver_log.addFilter(_ONE_LINE)


async def _init(conn: Conn) -> None:
    # JSON read as Python values; parameters arrive already dumped (rows.dump_json).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=str, decoder=json.loads, schema="pg_catalog")
    # Times clamped into datetime's range on read (rows.pg_timestamptz_in), not a failed read.
    await conn.set_type_codec(
        "timestamptz",
        encoder=pg_timestamptz_out,
        decoder=pg_timestamptz_in,
        schema="pg_catalog",
        format="tuple",
    )


async def _reset(conn: Conn) -> None:
    # No session state outlives an operation (no LISTEN, cursor or session lock on pooled
    # connections): no reset query (RESET ALL, UNLISTEN *, …) each time a connection goes
    # back. A transaction left open is rolled back by asyncpg itself before this runs.
    return


class PostgresConnector:
    """``Connector`` on PostgreSQL (≥ 13)."""

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
        """``statement_timeout`` (seconds, None = unbounded) bounds every operation, waiting for a
        pooled connection included. Past it the caller gets ``ServerUnavailable`` (503) at once,
        even if the database has frozen. It is also the server-side ``statement_timeout``.
        ``pool_timeout`` (opening the pool, waiting for a connection)
        defaults to it, or 10 s when unbounded. Migrations are never bounded. An option of the
        URL that the driver does not know is a ``ConfigError``."""
        # Never logged: it may carry a password. libpq's options with an equivalent become
        # asyncpg's (connect_timeout, options=-c …); the harmless ones are dropped, said once.
        given = driver_url(url)
        self._url = given.url
        for name, why in given.ignored.items():
            log.warning("PostgreSQL URL option %s ignored: %s", name, why)
        self._connect: dict[str, Any] = {} if given.timeout is None else {"timeout": given.timeout}
        # A password from the password file, read as libpq reads it (asyncpg keeps escapes).
        password = passfile_password(url)
        if password is not None:
            self._connect["password"] = password
        self._where = target_of(url)
        parts = urlsplit(url)
        self._secrets = [
            secret
            for secret in (parts.password, url_options(url).get("password"))
            if secret and len(secret) >= 3
        ]
        # Name our sessions in pg_stat_activity unless the operator's URL already does.
        named = "application_name" in url_options(url) or "application_name" in given.settings
        self._settings: dict[str, str] = {} if named else {"application_name": "jobagentctl"}
        self._listener_settings: dict[str, str] = (
            {} if named else {"application_name": "jobagentctl-listener"}
        )
        if statement_timeout is not None:
            # The database gives up on a statement (a lock wait, say) when we do.
            self._settings["statement_timeout"] = str(max(1, round(statement_timeout * 1000)))
        # The URL's own -c settings (a psycopg user's options=…), as the operator gave them.
        self._settings.update(given.settings)
        self._listener_settings.update(given.settings)
        self._min_size = min_size
        self._max_size = max_size
        self._statement_timeout = statement_timeout
        self._pool_timeout = pool_timeout or statement_timeout or 10.0
        # Operations given up on at the timeout, still unwinding (asyncpg cancels the query,
        # then may wait for the server): kept referenced until they finish.
        self._abandoned: set[asyncio.Task[Any]] = set()
        # While LISTEN is down, one poller re-checks the queue of every agent with waiters this
        # often (one query a tick for all of them, not one per waiter).
        self._poll_interval = poll_interval
        self._listen = listen
        self.pool: Pool | None = None
        self.waiters = Waiters()
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Pooled]:
        pool = self.pool
        if pool is None:
            raise ServerUnavailable("the PostgreSQL store is not open")
        try:
            conn = await pool.acquire(timeout=self._pool_timeout)
        except DRIVER_ERRORS as exc:
            raise self._unreachable(exc) from exc
        broken = False
        try:
            yield conn
        except JobAgentError:
            raise
        except DRIVER_ERRORS as exc:
            broken = _breaks_connection(exc)
            raise translate_error(exc) from exc
        finally:
            # (Cancelled mid-operation, by the bound: asyncpg waits for the query's
            # cancellation when the connection goes back, and terminates it if that fails.)
            if broken:
                # Cut mid-operation (a terminated backend, a reset socket, a protocol in an
                # unknown state): never handed to another request; the pool opens a new one.
                # (A connection asyncpg saw close is back in the pool already: nothing to do.)
                with suppress(asyncpg.InterfaceError):
                    conn.terminate()
            try:
                await pool.release(conn)
            except DRIVER_ERRORS as exc:
                # The reset on the way back failed (the connection was cut meanwhile):
                # asyncpg has terminated it. The operation's own outcome stands.
                log.debug("a pooled connection was discarded on release (%s)", type(exc).__name__)

    def _unreachable(self, exc: BaseException, *, opening: bool = False) -> JobAgentError:
        """A connection could not be had: where (never the password) and why, on one line."""
        if isinstance(exc, TimeoutError) and opening:
            return ServerUnavailable(
                f"cannot connect to PostgreSQL at {self._where}: no answer within "
                f"{self._pool_timeout:g} s (timeout)"
            )
        if isinstance(exc, TimeoutError):
            # The pool's wait: every connection busy, or new ones not answering in time.
            return ServerUnavailable(
                f"the database is busy: no connection to {self._where} available within "
                f"{self._pool_timeout:g} s (all in use, or the database not answering)"
            )
        if isinstance(exc, asyncpg.PostgresError) and not _is_connect_refusal(exc):
            return translate_error(exc)
        return ServerUnavailable(
            self._scrub(f"cannot connect to PostgreSQL at {self._where}: {why_not_connected(exc)}")
        )

    def _scrub(self, text: str) -> str:
        """``text`` without the URL's password, should a driver's message ever carry it."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool (waiting for its first connections), the listener and the poller."""
        if self.pool is not None:
            return
        one_line_driver_logs()
        try:
            pool = await asyncio.wait_for(
                asyncpg.create_pool(
                    self._url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    init=_init,
                    reset=_reset,
                    server_settings=self._settings,
                    **self._connect,
                ),
                self._pool_timeout,
            )
        except DRIVER_ERRORS as exc:
            raise self._unreachable(exc, opening=True) from exc
        self.pool = pool
        if self._listen:
            self._listener = asyncio.create_task(self._listen_forever(), name="jobagentctl-listen")
        self.waiters.start_poller(self._poll_interval, self._queued_counts)

    async def _bounded(self, operation: Coroutine[Any, Any, T]) -> T:
        """``operation`` within ``statement_timeout``. On timeout the caller is answered at once,
        and the operation is cancelled in the background. The cancellation of a query on a frozen
        server can take seconds more: nobody waits for it."""
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
        """Operations answered as timed out whose queries are still being cancelled. Until this is
        0, one of them may yet take a lock it was waiting for."""
        return len(self._abandoned)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: it was answered as a timeout already

    async def close(self) -> None:
        """Stop the listener and the poller, close the pool (its connections are cut if they
        are not handed back in time: a frozen database)."""
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
        """One dedicated LISTEN connection (not from the pool), re-opened when it drops."""
        backoff = 0.2
        while True:
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                self._listening.clear()
                raise
            except Exception as exc:  # the listener must outlive any failure: log, retry
                log.warning("LISTEN connection lost (%s); reconnecting", why_not_connected(exc))
                if self.listening:
                    backoff = 0.2  # it was up: a new outage
            # Until it is back, the poller asks for the waiters (one query per tick, not one
            # per waiter, and no wake-up of every waiter: each would run a claim).
            self._listening.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _listen_once(self) -> None:
        """Listen on one connection until it is lost (raises)."""
        lost = asyncio.Event()
        conn: Conn = await asyncpg.connect(
            self._url, server_settings=self._listener_settings, **self._connect
        )
        try:
            # A dropped connection is seen by its termination callback; a silent one (a frozen
            # server, a lost network) by the ping after 30 quiet seconds.
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(NOTIFY_CHANNEL, self._heard)
            self._listening.set()
            # Anything queued since the poller's last look went unheard.
            await self._catch_up()
            while True:
                with suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), 30.0)
                if lost.is_set():
                    raise ConnectionError("LISTEN connection closed")
                await conn.fetchval(statement("ping"), timeout=10.0)
        finally:
            conn.terminate()

    def _heard(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        # "<agent>" (one job) or "<agent>:<jobs>" (a reaper batch)
        agent, _, jobs = str(payload).partition(":")
        with suppress(ValueError):
            self.waiters.notify(UUID(agent), int(jobs or 1))

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
        rows = await self.all("queued_counts", agents=agents, cap=cap)
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
            await conn.execute(statement("unbounded"))  # a migration may rewrite big tables
            await conn.execute(statement("migrate_lock"))
            await conn.execute(statement("migrations_table"))
            if not await conn.fetchval(statement("compat_column")):
                await conn.execute(statement("add_compat_column"))
            applied = await conn.fetch(statement("applied_versions"))
            done = {row["version"] for row in applied}
            for version, script in migrations(self.dialect):
                if version not in done:
                    # A multi-statement script without arguments: simple query protocol.
                    await conn.execute(script)
                    compat = compat_of(script)
                    record = {"version": version, "compat": compat and compat.value}
                    sql, args = bind("record_migration", record)
                    await conn.execute(sql, *args)
                    applied_now.append(version)
        return applied_now

    # --- queries -------------------------------------------------------------------------------

    async def one(self, query: str, /, **params: Any) -> Row | None:
        """The first row of statement ``query``, within ``statement_timeout``."""
        return await self._bounded(self._one(query, params))

    async def _one(self, name: str, params: Params | None) -> Row | None:
        sql, args = bind(name, params)
        async with self._connection() as conn:
            return cast(Row | None, await conn.fetchrow(sql, *args))

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        """Every row of statement ``query``, within ``statement_timeout``."""
        return await self._bounded(self._all(query, params))

    async def _all(self, name: str, params: Params | None) -> list[Row]:
        sql, args = bind(name, params)
        async with self._connection() as conn:
            return cast(list[Row], await conn.fetch(sql, *args))

    async def each(
        self, query: str, limit: int, fresh: Callable[[], Params], /, **params: Any
    ) -> list[Row]:
        """The rows of one statement that claims the whole batch (``limit`` bound)."""
        return await self.all(query, **{**params, **fresh(), "limit": limit})

    async def locked(self, read: str, decide: Decide, /, **params: Any) -> Row | None:
        """One transaction locking the claim row, then the job row (every writer's order),
        within ``statement_timeout``."""
        return await self._bounded(self._locked(read, params, decide))

    async def _locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        while True:
            try:
                return await self._locked_once(read, params, decide)
            except _ClaimAppeared:
                continue  # rolled back, nothing written: take the locks again, in order

    async def _locked_once(self, read: str, params: Params, decide: Decide) -> Row | None:
        error: JobAgentError | None = None
        # One transaction in 4 round trips (3 when nothing is written): BEGIN, both locks and
        # the check between them leave together; then the read, the write, COMMIT. The locks
        # come in the order of every waiting writer: the claim row, then the job row
        # (finish_claimed deletes the claim, then updates the job; the reaper skips locked
        # rows), so no two of them deadlock. The job's lock is its own statement so that the
        # statements after it (each a new snapshot) see the claim row as it is now.
        locks = "BEGIN;\n" + inline(_LOCK_STATEMENTS, {"job_id": params["job_id"]})
        async with self._connection() as conn:
            try:
                if await conn.execute(locks) != "SELECT 0":
                    # A claim committed between the two locks: its row is not locked by us,
                    # and deleting it now would take the locks out of order.
                    raise _ClaimAppeared
                row = cast(Row | None, await conn.fetchrow(*_bound(read, params)))
                try:
                    write = decide(row)
                except JobAgentError as exc:
                    error, write = exc, None
                if write is not None:
                    row = cast(Row | None, await conn.fetchrow(*_bound(*write)))
                # Nothing was written on the other paths: COMMIT just ends the lock.
                await conn.execute("COMMIT")
            except BaseException:
                # A refused value, a claim that appeared: hand the pooled connection back
                # idle. (Cancelled at the bound, the query is still being cancelled: asyncpg
                # rolls back when the pool takes the connection back, and logs an error that
                # it had to.)
                with suppress(*DRIVER_ERRORS):
                    if conn.is_in_transaction():
                        await conn.execute("ROLLBACK")
                raise
        if error is not None:
            raise error
        return row

    async def writable(self) -> bool:
        """Always: a failing write on PostgreSQL fails its request; reachability is readiness
        enough."""
        return True

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """Nothing to do here: the statement that queued the jobs also ran pg_notify. That reaches
        this replica's listener and every other one at commit, in no extra round trip."""


def _bound(name: str, params: Params | None) -> tuple[Any, ...]:
    """``fetchrow``'s arguments for statement ``name``: its text, then its arguments."""
    sql, args = bind(name, params)
    return (sql, *args)
