"""The connectors under trouble, on real databases: a frozen PostgreSQL and a write lock held
by another process fail requests fast; an unreachable or unopenable database is unavailable and
says why; SQLite names a full disk and readiness says so; SQLite files are 0600 and get the
pragmas."""

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
from jobagentctl.server.store import open_store, sqlite_path
from jobagentctl.server.store.postgres import PostgresConnector
from jobagentctl.server.store.sqlite import SqliteConnector
from tests.fixtures import pgsync
from tests.fixtures.databases import sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, list_jobs, opened

pytestmark = pytest.mark.anyio


# --- a frozen PostgreSQL, a held write lock ---------------------------------------------------


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

    with pgsync.connect(url) as conn:
        conn.script("BEGIN; LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        yield
        conn.script("ROLLBACK")


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


# --- unreachable and unopenable databases, pragmas --------------------------------------------


async def test_sqlite_pragmas(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    async with opened(url) as store:
        await store.migrate()
        assert sql(url, "PRAGMA journal_mode") == [("wal",)]


async def test_sqlite_unopenable_file_is_unavailable(tmp_path: object) -> None:
    blocker = f"{tmp_path}/file"
    with open(blocker, "w"):
        pass
    store = open_store(f"sqlite:///{blocker}/sub/db.sqlite")
    with pytest.raises(ServerUnavailable):
        await store.open()


async def test_postgres_unreachable_is_unavailable_without_the_password() -> None:
    store = open_store(
        "postgresql://someone:s3cret-pw@127.0.0.1:1/nowhere", pool_timeout=1.0, listen=False
    )
    with pytest.raises(ServerUnavailable) as caught:
        await store.open()
    chain: BaseException | None = caught.value
    while chain is not None:
        assert "s3cret-pw" not in str(chain)
        chain = chain.__cause__
    assert "s3cret-pw" not in caught.value.message


# --- SQLite on a full disk, SQLite file modes -------------------------------------------------


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
