"""The store under stress, on real databases: one enqueue wakes one long-poll, not all of them;
a frozen PostgreSQL and a write lock held by another process fail requests fast; leases that
ran out during an outage get a grace; SQLite names a full disk and readiness says so; SQLite
files are 0600."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from jobagentctl.errors import ServerUnavailable
from jobagentctl.models import heartbeat_interval
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.store import OutageGrace, open_store, sqlite_path
from jobagentctl.server.store.postgres import PostgresConnector
from jobagentctl.server.store.sqlite import SqliteConnector
from jobagentctl.server.store.waiters import Waiters
from tests.fixtures.databases import sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, list_jobs, opened

pytestmark = pytest.mark.anyio

WAIT = 120.0  # long-polls that never time out by themselves within a test


# --- as many wake-ups as jobs ---------------------------------------------------------------------


async def test_regression_one_enqueue_wakes_one_of_2000_waiters(env: Env) -> None:
    """Every waiter would run a claim when woken: count the woken ones."""
    options: dict[str, object] = {"poll_interval": WAIT}
    if env.url.startswith("postgres"):
        # 2,000 initial checks queue for one connection: no statement bound for this store.
        options.update(min_size=1, max_size=1, statement_timeout=None)
    async with opened(env.url, **options) as waiter:
        connector = waiter.db
        if isinstance(connector, PostgresConnector):
            async with asyncio.timeout(30):
                while not connector.listening:
                    await asyncio.sleep(0.05)
        tasks = [asyncio.create_task(waiter.wait_for_job(env.agent, WAIT)) for _ in range(2000)]
        await asyncio.sleep(0)
        assert connector.waiters.waiting(env.agent) == 2000
        # Single lane (one SQLite thread / one pooled connection, first come first served):
        # this returns after every waiter's initial "anything queued?" check.
        await waiter.claim_stats()
        assert not any(task.done() for task in tasks)

        await waiter.entities.create_job(env.ws, env.agent, None, None, None)
        async with asyncio.timeout(30):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        await waiter.claim_stats()  # a round trip: every woken waiter has returned by now
        woken = [task for task in tasks if task.done()]
        assert len(woken) == 1, len(woken)
        assert woken[0].result() is True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert connector.waiters.waiting(env.agent) == 0


async def test_a_wake_up_left_unused_goes_to_the_next_waiter() -> None:
    waiters, agent = Waiters(), uuid.uuid4()
    first, second, third = (waiters.register(agent) for _ in range(3))
    waiters.notify(agent, 2)
    assert (first.is_set(), second.is_set(), third.is_set()) == (True, True, False)
    waiters.unregister(agent, first, consumed=True)
    assert not third.is_set()
    waiters.unregister(agent, second, consumed=False)  # e.g. its client went away
    assert third.is_set()
    waiters.notify(uuid.uuid4(), 5)  # another agent's jobs wake nobody here
    assert waiters.waiting(agent) == 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_regression_sqlite_waiters_are_polled_once_per_tick_not_each(env: Env) -> None:
    """Regression: every SQLite waiter asked "anything queued?" every second; 2,000 idle
    waiters cost half a core. Now one poller per process: a tick is one ``PRAGMA
    data_version``, and a count of the queued jobs only when another process has written;
    a job queued there wakes one waiter, not all of them."""
    waiter = open_store(env.url, poll_interval=0.05)
    assert isinstance(waiter.db, SqliteConnector)
    await waiter.open()
    tasks: list[asyncio.Task[bool]] = []
    try:
        tasks = [asyncio.create_task(waiter.wait_for_job(env.agent, WAIT)) for _ in range(2000)]
        await asyncio.sleep(0)
        await waiter.claim_stats()  # behind every waiter's initial check on the one thread
        statements: list[str] = []
        conn = waiter.db._conn  # the connection's own trace: every statement it runs
        assert conn is not None
        conn.set_trace_callback(statements.append)

        def ticks() -> int:
            return sum("data_version" in statement for statement in statements)

        await await_until(lambda: ticks() >= 2, what="the poller's first look")
        statements.clear()  # the first tick counted: nothing was known yet
        await await_until(lambda: ticks() >= 5, what="five poller ticks")
        assert all("data_version" in statement for statement in statements), set(statements)

        await env.job()  # env.store is another connection: another process on the file
        await await_until(lambda: any(task.done() for task in tasks), what="a waiter woken")
        seen = ticks()
        await await_until(lambda: ticks() >= seen + 5, what="five more ticks")
        assert sum(task.done() for task in tasks) == 1
        assert sum("json_each" in statement for statement in statements) == 1  # one count
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await waiter.close()


# --- a frozen PostgreSQL --------------------------------------------------------------------------


class FreezableProxy:
    """A TCP relay in front of PostgreSQL that can stop relaying, as a frozen server would: the
    connections stay open, nothing comes back (new connections are accepted and ignored)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.frozen = asyncio.Event()
        self.thawed = asyncio.Event()
        self.thawed.set()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def freeze(self) -> None:
        self.thawed.clear()

    def thaw(self) -> None:
        self.thawed.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.thawed.wait()
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    await self.thawed.wait()
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[FreezableProxy]:
    parts = urlsplit(database_url)
    relay = FreezableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await relay.start()
    try:
        yield relay
    finally:
        relay.thaw()
        await relay.stop()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_regression_a_frozen_postgres_fails_fast_and_readiness_says_so(
    env: Env, proxy: FreezableProxy
) -> None:
    parts = urlsplit(env.url)
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    store = open_store(url, min_size=1, max_size=2, listen=False, statement_timeout=0.5)
    await store.open()
    try:
        job = await env.job()
        assert await store.entities.get_job(env.ws, job.id) is not None
        assert await store.schema_current() is True
        proxy.freeze()
        # Generous outer bounds: without the store's own bound these would hang for good.
        async with asyncio.timeout(30):
            with pytest.raises(ServerUnavailable) as stalled:
                await store.entities.get_job(env.ws, job.id)
            assert "did not answer within 0.5 s" in stalled.value.message
            with pytest.raises(ServerUnavailable):  # the pool's connections hang: no wait either
                await store.claim_next(env.ws, env.agent, 30)
            assert await store.schema_current() is False
            assert await store.schema_current(timeout=0.2) is False
        proxy.thaw()
        async with asyncio.timeout(60):
            while not await store.schema_current():
                await asyncio.sleep(0.2)
        assert await store.entities.get_job(env.ws, job.id) is not None
    finally:
        proxy.thaw()
        await store.close()


@contextlib.contextmanager
def _write_lock_held(url: str) -> Iterator[None]:
    """Another process's transaction holding what every write needs: SQLite's database lock
    (``BEGIN IMMEDIATE``), PostgreSQL's lock on the job table."""
    if url.startswith("sqlite"):
        holder = sqlite3.connect(sqlite_path(url), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            yield
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        return
    from tests.fixtures import pgsync

    with pgsync.connect(url) as conn:
        conn.script("BEGIN; LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        yield
        conn.script("ROLLBACK")


async def test_regression_a_write_stuck_on_a_lock_fails_fast(env: Env) -> None:
    """Regression: on SQLite the 30 s busy timeout applied (no ``database_timeout``):
    with another process holding the write lock an enqueue hung 20 s, then answered 201. Now
    every operation is bounded on both databases: ``ServerUnavailable`` (503) within the
    bound, nothing written; the writes work again once the lock is gone."""
    options: dict[str, object] = {"statement_timeout": 1.0}
    if env.url.startswith("postgres"):
        options.update(min_size=1, max_size=4, listen=False)
    async with opened(env.url, **options) as store:
        job = await env.job()
        claimed = await store.claim_job(env.ws, env.agent, job.id, 60)
        with _write_lock_held(env.url):
            # 20 s: the old behaviour (30 s) fails it; the bound is 1 s (waits queue for SQLite's
            # one thread, PostgreSQL's pool, and the lock: all within it).
            async with asyncio.timeout(20):
                writes = [
                    store.entities.create_job(env.ws, env.agent, None, None, None),
                    store.heartbeat(env.ws, job.id, claimed.claim_id, None),
                    *(
                        store.entities.create_job(env.ws, env.agent, None, None, None)
                        for _ in range(8)
                    ),
                ]
                results = await asyncio.gather(*writes, return_exceptions=True)
            assert all(isinstance(r, ServerUnavailable) for r in results), results
            if isinstance(store.db, PostgresConnector):
                # Given up on, the queries are cancelled in the background (SQLite's never
                # started, or failed on the lock): none may still be waiting for the lock.
                connector = store.db
                await await_until(lambda: connector.abandoned == 0, what="the cancellations")
        async with asyncio.timeout(30):
            while True:
                with contextlib.suppress(ServerUnavailable):
                    await store.entities.create_job(env.ws, env.agent, None, None, None)
                    break
                await asyncio.sleep(0.1)
        jobs, total = await list_jobs(store, env.ws, limit=10)
        assert total == 2, jobs  # the claimed one and the last: nothing of the refused writes


# --- outage grace ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lapse(url: str, job_id: uuid.UUID, seconds_ago: float) -> None:
    if url.startswith("sqlite"):
        now = "(julianday('now') - 2440587.5) * 86400.0"
        sql(
            url,
            f"UPDATE job_claim SET claim_expires_at = {now} - ? WHERE job_id = ?",
            [seconds_ago, str(job_id)],
        )
    else:
        sql(
            url,
            "UPDATE job_claim SET claim_expires_at = now() - make_interval(secs => %s)"
            " WHERE job_id = %s",
            [seconds_ago, job_id],
        )


async def _outage(env: Env, clock: Clock, seconds: float) -> Reaper:
    """A reaper whose pass works, then fails for ``seconds`` (the store closed), then the store
    back, not yet reaped."""
    reaper = Reaper(env.store, interval=1, batch_size=100, max_reclaims=0, clock=clock)
    assert await reaper.run_once() is not None
    await env.store.close()
    clock.now += seconds
    assert await reaper.run_once() is None
    await env.store.open()
    return reaper


async def test_regression_leases_that_ran_out_during_an_outage_get_one_heartbeat_interval(
    env: Env,
) -> None:
    clock = Clock()
    dead_before = await env.job()
    during = await env.job()
    for job in (dead_before, during):
        await env.store.claim_job(env.ws, env.agent, job.id, 30)  # heartbeat interval 10 s
    reaper = await _outage(env, clock, 100)  # works at t=1000, fails at t=1100
    # One lease ran out long before the outage (its agent died), one 20 s ago (during it).
    _lapse(env.url, dead_before.id, 3600)
    _lapse(env.url, during.id, 20)

    clock.now = 1120.0  # the store is back: only the lease that was dead already is reaped
    first = await reaper.run_once()
    assert first is not None and first.requeued == 1
    assert (await env.store.entities.get_job(env.ws, dead_before.id)).status == "queued"  # type: ignore[union-attr]
    clock.now = 1129.0  # 9 s later: still within the 10 s interval
    assert (await reaper.run_once()).requeued == 0  # type: ignore[union-attr]
    clock.now = 1130.5  # past it: the agent did not come back, its job is requeued
    assert (await reaper.run_once()).requeued == 1  # type: ignore[union-attr]
    assert reaper.grace(1200.0) is None  # a minute after the outage, no grace is left


async def test_regression_a_heartbeat_within_the_grace_keeps_the_lease(env: Env) -> None:
    clock = Clock()
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    reaper = await _outage(env, clock, 50)
    _lapse(env.url, job.id, 5)
    clock.now += 1
    assert (await reaper.run_once()).requeued == 0  # type: ignore[union-attr]
    await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)  # the agent is back
    clock.now += 30
    assert (await reaper.run_once()).requeued == 0  # type: ignore[union-attr]
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.status == "inProgress"


@pytest.mark.parametrize(("lease", "interval"), [(2, 1.0), (30, 10.0), (600, 60.0)])
async def test_the_outage_grace_is_one_heartbeat_interval_within_its_bounds(
    env: Env, lease: int, interval: float
) -> None:
    """A lease that ran out during an outage is spared for one heartbeat interval after it: a
    third of the lease held within its bounds (2 s: 1 s, not 0.67 s; 600 s: 60 s, not 200 s)."""
    assert heartbeat_interval(lease) == interval
    job = await env.job()
    await env.store.claim_job(env.ws, env.agent, job.id, lease)
    _lapse(env.url, job.id, 5)

    async def requeued(ended_ago: float) -> int:
        grace = OutageGrace(began_ago=100.0, ended_ago=ended_ago)
        return (await env.store.reap(100, 0, grace)).requeued

    assert await requeued(interval - 0.2) == 0
    assert await requeued(interval + 0.2) == 1


# --- SQLite on a full disk, SQLite file modes -----------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only: skipped, saying why, where mounting is not allowed)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill ({done.stderr.strip() or done.returncode})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_regression_sqlite_names_a_full_disk_and_readiness_reflects_it(
    tiny_disk: Path,
) -> None:
    async with opened(f"sqlite:///{tiny_disk / 'jobs.db'}") as store:
        assert isinstance(store.db, SqliteConnector)
        await store.migrate()
        ws = await store.entities.create_workspace("w")
        agent = (await store.entities.upsert_agent(ws, uuid.uuid4(), "a", "shell", {}, None)).id
        filler = tiny_disk / "filler"
        filler.write_bytes(b"\0" * (os.statvfs(tiny_disk).f_bavail * 4096 - 64 * 1024))
        payload = {"blob": "x" * 16_000}
        with pytest.raises(ServerUnavailable) as full:
            for _ in range(1000):
                await store.entities.create_job(ws, agent, None, payload, None)
        assert "disk is full" in full.value.message
        assert store.db.write_error == "the disk is full"
        assert await store.schema_current() is False
        filler.unlink()  # the operator frees space
        assert await store.schema_current() is True
        assert store.db.write_error is None
        await store.entities.create_job(ws, agent, None, None, None)


async def test_regression_sqlite_files_are_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "jobs.db"
    previous = os.umask(0o022)
    try:
        async with opened(f"sqlite:///{path}") as store:
            await store.migrate()
            files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
            assert all(f.exists() for f in files)
            modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in files}
            assert modes == {f.name: 0o600 for f in files}, modes
        assert os.umask(0o022) == 0o022  # the process umask is left as it was
    finally:
        os.umask(previous)


@pytest.mark.parametrize(
    ("content", "reason"), [(b"not a database at all" * 100, "file is not a database")]
)
async def test_an_sqlite_file_that_cannot_be_opened_says_why(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """Where and why, on one line: not only "cannot open"."""
    path = tmp_path / "jobs.db"
    path.write_bytes(content)
    store = open_store(f"sqlite:///{path}")
    with pytest.raises(ServerUnavailable) as failed:
        await store.open()
    await store.close()
    assert failed.value.message == f"cannot open the SQLite database at {path}: {reason}"
