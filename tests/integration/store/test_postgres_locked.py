"""PostgreSQL's locked status path (a status change without the claim id that the one statement
could not take, or with ``force``): its locks and the check between them leave in one
simple-protocol query; a claim committed between the two locks makes it start again rather than
delete a claim row it holds no lock on. The one statement of a status change without the claim
id (``finish_unclaimed``) writes nothing when a claim commits while it waits for the job's lock:
the locked path then applies it, in order."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from jobagentctl.errors import ServerUnavailable
from jobagentctl.models import JobStatus
from jobagentctl.server.store import postgres
from jobagentctl.server.store.postgres_sql import bind, inline
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, opened, set_status

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_regression_a_claim_committed_between_the_two_locks_starts_the_path_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim row is locked first, then the job row: a claim that commits while the path
    waits for the job's lock was not there for the first lock. Deleting its row then would take
    the locks out of every other writer's order; the path must roll back and lock again (here:
    twice through the locks, then the status applied to the claimed job)."""
    job = await env.job()
    sent: list[str] = []

    def counted(names: tuple[str, ...], params: dict[str, Any]) -> str:
        sent.append(names[0])
        return inline(names, params)

    monkeypatch.setattr(postgres, "inline", counted)
    claimer = await asyncpg.connect(env.url)
    watcher = await asyncpg.connect(env.url)
    try:
        # Another replica's claim, in a transaction still open: it holds the job row's lock and
        # its new claim row is not visible yet.
        claim = {
            "job_id": job.id,
            "agent_id": env.agent,
            "workspace_id": env.ws,
            "lease_seconds": 60,
            "agent_lease": False,
            "lease_min": 1,
            "lease_max": 1,
            "agent_scope": env.agent,
            "new_claim_id": uuid4(),
            "limit": 1,
        }
        sql, args = bind("claim_job", claim)
        await claimer.execute("BEGIN")
        assert await claimer.fetch(sql, *args)
        # force: the locked path from the start (without it, finish_unclaimed waits for the
        # job's lock first: the next test).
        update = asyncio.create_task(
            set_status(env.store, env.ws, job.id, JobStatus.SUCCESSFUL, force=True)
        )

        async def waiting() -> bool:
            return bool(await watcher.fetchval(WAITING_ON_A_LOCK))

        await await_until(waiting, what="the status change waiting for the job's lock")
        assert sent == ["lock_claim"]  # found no claim row, then waited for the job row
        await claimer.execute("COMMIT")
        async with asyncio.timeout(30):
            change = await update
    finally:
        await claimer.close()
        await watcher.close()
    assert sent == ["lock_claim", "lock_claim"]  # the claim appeared: once more, in order
    assert change.status == JobStatus.SUCCESSFUL
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.status == JobStatus.SUCCESSFUL


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_claim_committed_while_the_one_statement_waits_leaves_it_to_the_locked_path(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status change without the claim id on a job no claim row holds is one statement
    (``finish_unclaimed``), which read the job and "no claim row" in its snapshot. A claim
    that commits while it waits for the job's lock adds a claim row that snapshot cannot see:
    the statement must then write nothing (the job row is not the version it read), and the
    locked path applies the change: the claim row is ended with it, none is left behind on a
    finished job."""
    job = await env.job()
    sent: list[str] = []
    one = env.store.db.one

    async def counted(query: str, /, **params: Any) -> Any:
        row = await one(query, **params)
        sent.append(f"{query}:{'row' if row is not None else 'none'}")
        return row

    monkeypatch.setattr(env.store.db, "one", counted)
    claimer = await asyncpg.connect(env.url)
    watcher = await asyncpg.connect(env.url)
    try:
        claim = {
            "job_id": job.id,
            "agent_id": env.agent,
            "workspace_id": env.ws,
            "lease_seconds": 60,
            "agent_lease": False,
            "lease_min": 1,
            "lease_max": 1,
            "agent_scope": env.agent,
            "new_claim_id": uuid4(),
        }
        sql, args = bind("claim_job", claim)
        await claimer.execute("BEGIN")
        (claimed,) = await claimer.fetch(sql, *args)
        update = asyncio.create_task(set_status(env.store, env.ws, job.id, JobStatus.SUCCESSFUL))

        async def waiting() -> bool:
            return bool(await watcher.fetchval(WAITING_ON_A_LOCK))

        await await_until(waiting, what="the one statement waiting for the job's lock")
        assert sent == []  # still waiting, in finish_unclaimed
        await claimer.execute("COMMIT")
        async with asyncio.timeout(30):
            change = await update
        left = await watcher.fetchval("SELECT count(*) FROM job_claim WHERE job_id = $1", job.id)
        revoked = await watcher.fetchval(
            "SELECT claim_id FROM job_revoked_claim WHERE job_id = $1", job.id
        )
    finally:
        await claimer.close()
        await watcher.close()
    assert sent[0] == "finish_unclaimed:none", sent  # it wrote nothing
    assert change.status == JobStatus.SUCCESSFUL
    assert left == 0  # the claim row was ended by the locked path, not left behind
    assert revoked == claimed["claim_id"]  # as any status change without its claim id does
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.outcome, a.ended_at is not None) for a in attempts] == [
        (1, "completed", True)
    ]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_regression_the_locked_path_given_up_on_a_lock_hands_its_connection_back_idle(
    env: Env,
) -> None:
    """A status change stuck behind another transaction's lock on the job is answered 503 at
    the bound, and the one pooled connection, whose transaction began with the locks, serves
    the next status change once the lock is gone (rolled back, not replaced)."""
    job = await env.job()
    name = f"locked-{uuid4().hex[:8]}"
    url = f"{env.url}{'&' if '?' in env.url else '?'}application_name={name}"
    sessions = "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
    options: dict[str, Any] = {"min_size": 1, "max_size": 1, "listen": False}
    async with opened(url, statement_timeout=1.0, **options) as store:
        connector = store.db
        assert isinstance(connector, postgres.PostgresConnector)
        holder = await asyncpg.connect(env.url)
        try:
            before = [row["pid"] for row in await holder.fetch(sessions, name)]
            assert len(before) == 1
            await holder.execute("BEGIN")
            await holder.execute("SELECT id FROM job WHERE id = $1 FOR UPDATE", job.id)
            with pytest.raises(ServerUnavailable):
                await set_status(store, env.ws, job.id, JobStatus.CANCELLED)
            await holder.execute("ROLLBACK")
            await await_until(lambda: connector.abandoned == 0, what="the cancellation")
            change = await set_status(store, env.ws, job.id, JobStatus.CANCELLED)
            assert change.status == JobStatus.CANCELLED
            after = [row["pid"] for row in await holder.fetch(sessions, name)]
            assert after == before  # the same connection, kept
        finally:
            await holder.close()
