"""Long-poll wake-ups (``wait_for_job``): woken by create, release and reap; across replicas on
PostgreSQL (LISTEN/NOTIFY), and again after the LISTEN connection is dropped.

The waiting store polls only every 60 s here, so a test passes only if the signal arrives.
To be sure the waiter has finished its initial "anything queued?" check before the job is
queued, the waiting store is single-lane (SQLite: its one worker thread; PostgreSQL: a pool of
one connection, served first come, first served) and a ``claim_stats()`` call behind the
check returns only after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from jobagentctl.models import JobStatus
from jobagentctl.server.store import Store
from jobagentctl.server.store.postgres import PostgresConnector
from tests.fixtures.databases import expire_claims, sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, opened, set_status

pytestmark = pytest.mark.anyio

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
