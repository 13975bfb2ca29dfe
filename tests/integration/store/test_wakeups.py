"""Long-poll wake-ups (``wait_for_job``) on both databases: woken by create, release and reap;
across replicas on PostgreSQL (LISTEN/NOTIFY), and again after the LISTEN connection is dropped;
one enqueue wakes one waiter of thousands, not all of them.

The waiting store polls only every 60 s here, so a test passes only if the signal arrives.
To be sure the waiter has finished its initial "anything queued?" check before the job is
queued, the waiting store is single-lane (SQLite: its one worker thread; PostgreSQL: a pool of
one connection, served first come, first served) and a ``claim_stats()`` call behind the
check returns only after it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from jobagentctl.models import JobStatus
from jobagentctl.server.store import Store, open_store
from jobagentctl.server.store.postgres import PostgresConnector
from jobagentctl.server.store.sqlite import SqliteConnector
from jobagentctl.server.store.waiters import Waiters
from tests.fixtures.databases import expire_claims, sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, opened, set_status

pytestmark = pytest.mark.anyio


# --- woken by create, release, reap, a replica ------------------------------------------------


WAIT = 60.0  # the long-poll's own timeout: far longer than any test may take


@pytest.fixture
async def waiter(env: Env) -> AsyncIterator[Store]:
    options: dict[str, object] = {"poll_interval": WAIT}
    if env.url.startswith("postgres"):
        options.update(min_size=1, max_size=1)
    async with opened(env.url, **options) as store:
        connector = store.db
        if isinstance(connector, PostgresConnector):
            await await_until(lambda: connector.listening, what="LISTEN connection")
        yield store


async def _waiting(store: Store, agent: UUID) -> asyncio.Task[bool]:
    task = asyncio.create_task(store.wait_for_job(agent, WAIT))
    await asyncio.sleep(0)  # let it register and submit its first check
    await store.claim_stats()  # queued behind that check on the single lane
    assert not task.done()
    return task


async def _woken(task: asyncio.Task[bool]) -> bool:
    async with asyncio.timeout(20):
        return await task


async def test_nothing_queued_times_out(env: Env) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await env.store.wait_for_job(env.agent, 0.3) is False
    assert loop.time() - started >= 0.29
    await env.job()
    assert await env.store.wait_for_job(env.agent, 0.3) is True  # already queued: at once


async def test_woken_by_create(env: Env, waiter: Store) -> None:
    task = await _waiting(waiter, env.agent)
    other = await _waiting(waiter, env.other_agent)
    await waiter.entities.create_job(env.ws, env.agent, None, None, None)
    assert await _woken(task) is True
    assert not other.done()  # another agent's long-poll sleeps on
    other.cancel()


async def test_woken_by_release(env: Env, waiter: Store) -> None:
    await env.job()
    claimed = await waiter.claim_next(env.ws, env.agent, 30)
    assert claimed is not None
    task = await _waiting(waiter, env.agent)
    await set_status(waiter, env.ws, claimed.id, JobStatus.QUEUED, claim_id=claimed.claim_id)
    assert await _woken(task) is True


async def test_woken_by_reap(env: Env, waiter: Store) -> None:
    await env.job()
    assert await waiter.claim_next(env.ws, env.agent, 30) is not None
    expire_claims(env.url)
    task = await _waiting(waiter, env.agent)
    assert (await waiter.reap(500, 0)).requeued == 1
    assert await _woken(task) is True


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_woken_across_replicas(env: Env, waiter: Store) -> None:
    """The waiter is one replica; ``env.store`` (another pool) is the other."""
    task = await _waiting(waiter, env.agent)
    await env.job()
    assert await _woken(task) is True

    claimed = await env.store.claim_next(env.ws, env.agent, 30)
    assert claimed is not None
    expire_claims(env.url)
    task = await _waiting(waiter, env.agent)
    assert (await env.store.reap(500, 0)).requeued == 1
    assert await _woken(task) is True


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_listener_reconnects_after_its_connection_is_killed(env: Env, waiter: Store) -> None:
    connector = waiter.db
    assert isinstance(connector, PostgresConnector)
    dbname = env.url.rsplit("/", 1)[1]
    listeners = (
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name = 'jobagentctl-listener' AND datname = %s"
    )
    before = {pid for (pid,) in sql(env.url, listeners, [dbname])}
    assert len(before) == 2  # the waiter's and env.store's
    killed = sql(
        env.url, "SELECT pg_terminate_backend(pid) FROM (" + listeners + ") AS l", [dbname]
    )
    assert killed == [(True,), (True,)]

    async def reconnected() -> bool:
        now = {pid for (pid,) in sql(env.url, listeners, [dbname])}
        return len(now) == 2 and not now & before and connector.listening

    await await_until(reconnected, what="both listeners to reconnect")
    task = await _waiting(waiter, env.agent)
    await env.job()
    assert await _woken(task) is True


# --- as many wake-ups as jobs -----------------------------------------------------------------


HERD_WAIT = 120.0  # long-polls that never time out by themselves within a test


async def test_regression_one_enqueue_wakes_one_of_2000_waiters(env: Env) -> None:
    """Every waiter would run a claim when woken: count the woken ones."""
    options: dict[str, object] = {"poll_interval": HERD_WAIT}
    if env.url.startswith("postgres"):
        # 2,000 initial checks queue for one connection: no statement bound for this store.
        options.update(min_size=1, max_size=1, statement_timeout=None)
    async with opened(env.url, **options) as waiter:
        connector = waiter.db
        if isinstance(connector, PostgresConnector):
            async with asyncio.timeout(30):
                while not connector.listening:
                    await asyncio.sleep(0.05)
        tasks = [
            asyncio.create_task(waiter.wait_for_job(env.agent, HERD_WAIT)) for _ in range(2000)
        ]
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
        tasks = [
            asyncio.create_task(waiter.wait_for_job(env.agent, HERD_WAIT)) for _ in range(2000)
        ]
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
