"""The SQLite connector: zero set-up, one file, safe to share between server processes.

One connection, driven by one worker thread. A named block of several statements is a chain
run in one ``BEGIN IMMEDIATE`` transaction: SQLite has no data-modifying CTEs. Each statement
sees the caller's parameters plus the columns of the first row of every statement before it.
The chain answers with those rows merged (none if its first statement returned none).
A single write statement is its own transaction. Either way SQLite's database lock is held
from the start, which serialises lease decisions (WAL, busy_timeout).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from functools import cache, partial
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from jobagentctl.errors import (
    Conflict,
    JobAgentError,
    NotFound,
    ServerError,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.server.store.connector import Decide, Params, Row
from jobagentctl.server.store.queries import load_queries, migrations
from jobagentctl.server.store.schema_window import compat_of
from jobagentctl.server.store.waiters import Waiters

__all__ = ["SqliteConnector"]

T = TypeVar("T")
Q = load_queries("sqlite")

# Errors that mean "nothing can be written now" (sqlite3 error codes, primary code in the low
# byte): named in the answer, remembered for readiness until a write succeeds again.
_WRITE_FAILURES = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_IOERR: "a disk I/O error",
    sqlite3.SQLITE_READONLY: "the file is read-only",
    sqlite3.SQLITE_CANTOPEN: "the file cannot be opened",
}

# Parameters as the store passes them: UUIDs are stored as their text, lists (status filters)
# as JSON arrays read with json_each().
sqlite3.register_adapter(UUID, str)
sqlite3.register_adapter(list, json.dumps)


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, values, strict=True)}


def _first(conn: sqlite3.Connection, statement: str, params: Params | None) -> Row | None:
    """The first row. Reads every row so the statement is finished (and its implicit
    transaction, if any, committed) before we go on: a half-read RETURNING keeps the lock."""
    rows: list[Row] = conn.execute(statement, params or {}).fetchall()
    return rows[0] if rows else None


def _split(script: str) -> Iterator[str]:
    """The statements of a script or a named block, comment-only pieces dropped."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statement, pending = pending.strip(), ""
            if not _only_comments(statement.rstrip(";")):
                yield statement
    if not _only_comments(pending):
        yield pending.strip()  # a block's last statement needs no semicolon


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())


@cache
def _chain(name: str) -> tuple[str, ...]:
    return tuple(_split(Q[name]))


@contextmanager
def _transaction(conn: sqlite3.Connection, begin: str | None = "BEGIN IMMEDIATE") -> Iterator[None]:
    """A transaction begun with ``begin`` (None: the caller has begun it)."""
    if begin is not None:
        conn.execute(begin)
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _begin_waiting(conn: sqlite3.Connection, begin: str, wait: float) -> None:
    """Run ``begin`` (a statement taking the write lock), retrying while another connection
    holds the lock, for up to ``wait`` seconds.

    The connection's own busy timeout may be shorter than an operation such as a migration may
    wait.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            conn.execute(begin)
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.05)


def _run_chain(conn: sqlite3.Connection, name: str, params: Params | None) -> Row | None:
    statements = _chain(name)
    if len(statements) == 1:
        return _first(conn, statements[0], params)
    merged: dict[str, Any] = dict(params or {})
    result: dict[str, Any] | None = None
    with nullcontext() if conn.in_transaction else _transaction(conn):
        for statement in statements:
            row = _first(conn, statement, merged)
            if row is None and result is None:
                return None
            if row is not None:
                merged.update(row)
                result = {**(result or {}), **row}
    return result


def _translated(fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
    """The one place sqlite3's errors become the project's (messages without SQL)."""
    try:
        return fn(conn)
    except JobAgentError:
        raise
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
            raise Conflict("the object already exists") from exc
        if "FOREIGN KEY" in str(exc):
            raise NotFound("a referenced workspace or job agent does not exist") from exc
        raise ServerError("unexpected SQLite error") from exc
    except sqlite3.OperationalError as exc:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        cause = _WRITE_FAILURES.get(code)
        if cause is not None:
            raise ServerUnavailable(f"the SQLite database cannot be written: {cause}") from exc
        if code == sqlite3.SQLITE_BUSY:
            raise ServerUnavailable(
                "the SQLite database is locked by another connection (busy timeout passed)"
            ) from exc
        # Unreadable file, missing schema: an operator problem.
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


class SqliteConnector:
    """``Connector`` on one SQLite file."""

    dialect = "sqlite"
    merges_json = False  # no top-level merge operator: json_patch() merges nested objects too

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_ms: int = 30_000,
        poll_interval: float = 1.0,
        statement_timeout: float | None = None,
    ) -> None:
        """``statement_timeout`` (seconds, None = unbounded, as PostgreSQL's) bounds every
        operation but migrations:

        - half of it to get the one worker thread (operations queue for it);
        - half to get the database lock (``busy_timeout``, when lower than ``busy_timeout_ms``).

        An operation that cannot start in time is refused without touching the database. Past
        the whole bound the caller gets ``ServerUnavailable`` (503) at once. So another process
        holding the write lock fails requests fast rather than for SQLite's default wait of 30 s.
        """
        self.path = path
        self._statement_timeout = statement_timeout
        self._migration_wait = self._busy_timeout = busy_timeout_ms / 1000.0
        if statement_timeout is not None:
            self._busy_timeout = min(self._busy_timeout, statement_timeout / 2)
        # Other server processes on the same file cannot signal us: one poller re-checks the
        # queue of every agent with waiters this often (not one query per waiter).
        self._poll_interval = poll_interval
        self._data_version: int | None = None  # PRAGMA data_version at the last poll
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.waiters = Waiters()
        # Why the last write failed (disk full…), None once one succeeds: readiness reads it.
        self.write_error: str | None = None
        self._changes = 0

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, bounded: bool = True) -> T:
        if self._executor is None or self._conn is None:
            raise ServerUnavailable("the SQLite store is not open")
        loop = asyncio.get_running_loop()
        timeout = self._statement_timeout if bounded else None
        if timeout is None:
            return await loop.run_in_executor(
                self._executor, partial(self._call, fn, self._conn, None)
            )
        start_by = time.monotonic() + timeout - self._busy_timeout
        future = loop.run_in_executor(self._executor, partial(self._call, fn, self._conn, start_by))
        try:
            done, _ = await asyncio.wait((future,), timeout=timeout)
        except asyncio.CancelledError:
            future.cancel()
            raise
        if done:
            return future.result()
        # Not started yet: it never runs. Running: it ends by itself, its lock wait bounded.
        future.cancel()
        raise ServerUnavailable(f"the SQLite database did not answer within {timeout:g} s")

    def _call(
        self,
        fn: Callable[[sqlite3.Connection], T],
        conn: sqlite3.Connection,
        start_by: float | None,
    ) -> T:
        if start_by is not None and time.monotonic() > start_by:
            # Queued behind operations that waited for the lock: too late to wait for it too.
            raise ServerUnavailable("the SQLite database is busy: the operation could not start")
        try:
            result = _translated(fn, conn)
        except ServerUnavailable as exc:
            code = getattr(exc.__cause__, "sqlite_errorcode", 0) & 0xFF
            if code in _WRITE_FAILURES:
                self.write_error = _WRITE_FAILURES[code]
            self._changes = conn.total_changes  # rows of a statement rolled back since count too
            raise
        if self.write_error is not None and conn.total_changes != self._changes:
            self.write_error = None  # something was written since
        self._changes = conn.total_changes
        return result

    async def writable(self) -> bool:
        """False while writes fail (see ``write_error``); after a failure, probes with a write
        that changes nothing visible."""
        if self.write_error is None:
            return True
        try:
            await self.one("write_probe")
        except JobAgentError:
            return False
        self.write_error = None
        return True

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (created owner-only) on the one worker thread; start the poller."""
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
        self.waiters.start_poller(self._poll_interval, self._queued_counts)

    def _connect(self) -> sqlite3.Connection:
        file = None if self.path == ":memory:" else Path(self.path)
        # Job payloads and key hashes live here: a new file, its WAL and its shared-memory file
        # are the owner's only (0600; SQLite gives the WAL and SHM the database file's mode).
        # umask is process-wide, hence restored at once; the chmod covers a racing thread.
        created = file is not None and not file.exists()
        old_umask = os.umask(0o077) if created else None
        try:
            if file is not None:
                file.parent.mkdir(parents=True, exist_ok=True)
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
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # opens WAL and SHM
            if created and file is not None:
                for path in (file, Path(f"{file}-wal"), Path(f"{file}-shm")):
                    if path.exists():
                        path.chmod(0o600)
        except (sqlite3.Error, OSError) as exc:
            # sqlite3's and the OS's messages name no value: "file is not a database",
            # "unable to open database file", "Permission denied".
            reason = " ".join(str(getattr(exc, "strerror", None) or exc).split())
            raise ServerUnavailable(
                f"cannot open the SQLite database at {self.path}: {reason}"
            ) from exc
        finally:
            if old_umask is not None:
                os.umask(old_umask)
        return conn

    async def close(self) -> None:
        """Stop the poller, close the connection and its thread."""
        await self.waiters.stop_poller()
        conn, executor = self._conn, self._executor
        self._conn = self._executor = None
        if conn is not None and executor is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(executor, conn.close)
        if executor is not None:
            executor.shutdown(wait=True)

    async def migrate(self) -> list[int]:
        """Apply pending migrations in one transaction, waiting for another process's."""

        # Statement by statement inside our own transaction: executescript() would commit first.
        # Foreign keys off (outside the transaction: the pragma is a no-op inside one) and
        # checked before COMMIT, SQLite's documented way to rebuild a table without firing the
        # ON DELETE actions of the rows it moves.
        def run(conn: sqlite3.Connection) -> list[int]:
            applied_now: list[int] = []
            conn.execute("PRAGMA foreign_keys = OFF")
            try:
                _begin_waiting(conn, Q["migrate_lock"], self._migration_wait)
                with _transaction(conn, None):
                    conn.execute(Q["migrations_table"])
                    if not conn.execute(Q["compat_column"]).fetchone()["found"]:
                        conn.execute(Q["add_compat_column"])
                    done = {row["version"] for row in conn.execute(Q["applied_versions"])}
                    for version, script in migrations(self.dialect):
                        if version not in done:
                            for statement in _split(script):
                                conn.execute(statement)
                            compat = compat_of(script)
                            record = {"version": version, "compat": compat and compat.value}
                            conn.execute(Q["record_migration"], record)
                            applied_now.append(version)
                    if conn.execute("PRAGMA foreign_key_check").fetchall():
                        raise ServerError("a migration left rows that break a foreign key")
            finally:
                conn.execute("PRAGMA foreign_keys = ON")
            return applied_now

        # Never bounded, as on PostgreSQL: another process may be migrating the same file.
        return await self._run(run, bounded=False)

    # --- queries -------------------------------------------------------------------------------

    async def one(self, query: str, /, **params: Any) -> Row | None:
        """The first row of the chain ``query`` (its rows merged, see the module docstring)."""
        return await self._run(partial(_run_chain, name=query, params=params))

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        """Every row of the single statement ``query``."""

        def run(conn: sqlite3.Connection) -> list[Row]:
            rows: list[Row] = conn.execute(Q[query], params).fetchall()
            return rows

        return await self._run(run)

    async def each(
        self, query: str, limit: int, fresh: Callable[[], Params], /, **params: Any
    ) -> list[Row]:
        """The chain ``query`` run again, each time with ``fresh()`` over ``params``.

        All runs are in one write transaction, until a run answers none or ``limit`` rows are in.
        A chain answers one row: SQLite has no data-modifying CTEs.
        """

        def run(conn: sqlite3.Connection) -> list[Row]:
            rows: list[Row] = []
            with _transaction(conn):
                while len(rows) < limit:
                    row = _run_chain(conn, query, {**params, **fresh()})
                    if row is None:
                        break
                    rows.append(row)
            return rows

        return await self._run(run)

    async def locked(self, read: str, decide: Decide, /, **params: Any) -> Row | None:
        """``read``, ``decide`` and the write in one ``BEGIN IMMEDIATE`` transaction
        (``lock_job``: SQLite's lock is the whole database)."""

        def run(conn: sqlite3.Connection) -> Row | None:
            with _transaction(conn, Q["lock_job"]):
                row = _first(conn, Q[read], params)
                write = decide(row)
                return row if write is None else _run_chain(conn, *write)

        return await self._run(run)

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """Wake this process's waiters (other processes' pollers see the commit)."""
        self.waiters.notify(agent_id, jobs)

    async def _queued_counts(self, agents: list[UUID]) -> dict[UUID, int]:
        """Jobs queued per agent, asked only when another connection has committed since the
        last poll (``PRAGMA data_version``).

        What this process queues wakes its waiters itself. A waiter checks the queue when it
        starts waiting.
        """
        cap = max(self.waiters.waiting(agent) for agent in agents)

        def run(conn: sqlite3.Connection) -> dict[UUID, int]:
            version = conn.execute("PRAGMA data_version").fetchone()["data_version"]
            if version == self._data_version:
                return {}
            self._data_version = version
            params = {"agents": [str(agent) for agent in agents], "cap": cap}
            rows = conn.execute(Q["queued_counts"], params).fetchall()
            return {UUID(row["job_agent_id"]): int(row["jobs"]) for row in rows}

        return await self._run(run)
