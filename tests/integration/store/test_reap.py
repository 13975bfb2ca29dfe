"""The reaper's store side on both databases: expired leases requeued (in batches, past held
jobs, up to max reclaims), reapers racing each other and heartbeats, the grace after an outage,
and a deleted agent's claim."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from jobagentctl.errors import ClaimLost
from jobagentctl.models import AttemptOutcome, ClaimedJob, ClaimState, JobStatus, heartbeat_interval
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.store import OutageGrace, Store
from tests.fixtures import pgsync
from tests.fixtures.databases import expire_claims, sql
from tests.integration.store.conftest import Env, list_jobs, set_status, stores

pytestmark = pytest.mark.anyio


# --- reaper -----------------------------------------------------------------------------------


def _claim_rows(env: Env) -> int:
    return int(sql(env.url, "SELECT count(*) FROM job_claim")[0][0])


async def test_reap_requeues_expired_leases_only(env: Env) -> None:
    e, h, u = [await env.job() for _ in range(3)]
    a = await env.store.claim_job(env.ws, env.agent, e.id, 30)
    await env.store.claim_job(env.ws, env.agent, h.id, 30)
    await env.store.claim_job(env.ws, env.agent, u.id, None)
    expire_claims(env.url, [e.id])
    # Even a long-stale unleased V1 job is never reaped: it has no claim row.
    sql(
        env.url,
        "UPDATE job SET started_at = started_at - 86400 WHERE id = ?"
        if env.url.startswith("sqlite")
        else "UPDATE job SET started_at = started_at - interval '1 day' WHERE id = %s",
        [str(u.id)],
    )

    result = await env.store.reap(500, 0)
    assert (result.requeued, result.failed, result.total) == (1, 0, 1)
    requeued = await env.store.entities.get_job(env.ws, e.id)
    assert requeued is not None and requeued.status == JobStatus.QUEUED
    for other in (h, u):
        still = await env.store.entities.get_job(env.ws, other.id)
        assert still is not None and still.status == JobStatus.IN_PROGRESS
    attempts = await env.store.list_attempts(env.ws, e.id)
    assert [(x.outcome, x.ended_at is not None) for x in attempts] == [("expired", True)]
    with pytest.raises(ClaimLost) as lost:
        await env.store.heartbeat(env.ws, e.id, a.claim_id, None)
    assert lost.value.job_status == "queued"
    with pytest.raises(ClaimLost):
        await env.status(e.id, JobStatus.SUCCESSFUL, claim_id=a.claim_id)
    assert (await env.store.reap(500, 0)).total == 0


async def test_reap_in_batches_until_nothing_is_left(env: Env) -> None:
    jobs = [await env.job() for _ in range(7)]
    for job in jobs:
        await env.store.claim_job(env.ws, env.agent, job.id, 30)
    expire_claims(env.url)
    result = await env.store.reap(3, 0)
    assert result.requeued == 7
    assert _claim_rows(env) == 0


@pytest.mark.parametrize(("expired", "batch", "statements"), [(4, 4, 1), (4, 2, 2), (5, 2, 3)])
async def test_a_pass_runs_no_statement_past_its_last_batch(
    env: Env, monkeypatch: pytest.MonkeyPatch, expired: int, batch: int, statements: int
) -> None:
    """A batch tells whether an expired claim is left beyond it: a pass whose last batch was
    exactly full ends there, not with one more statement that finds nothing."""
    for _ in range(expired):
        job = await env.job()
        await env.store.claim_job(env.ws, env.agent, job.id, 30)
    expire_claims(env.url)
    connector = env.store.db
    run = connector.one
    names: list[str] = []

    async def counted(name: str, /, **params: object) -> object:
        names.append(name)
        return await run(name, **params)

    monkeypatch.setattr(connector, "one", counted)
    assert (await env.store.reap(batch, 0)).requeued == expired
    assert names.count("reap") == statements
    assert _claim_rows(env) == 0


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_reap_commits_without_waiting_for_the_wal_and_only_itself(env: Env) -> None:
    """The reap statement's transaction alone commits with synchronous_commit off: the pooled
    connection that ran it commits every later statement durably again."""
    from jobagentctl.server.store import postgres
    from jobagentctl.server.store.postgres_sql import bind

    job = await env.job()
    await env.store.claim_job(env.ws, env.agent, job.id, 30)
    expire_claims(env.url)
    connector = env.store.db
    assert isinstance(connector, postgres.PostgresConnector)
    params = {
        "batch_size": 10,
        "max_reclaims": 0,
        "outage_began_ago": 0.0,
        "outage_ended_ago": 1e9,
        "heartbeat_min": 1.0,
        "heartbeat_max": 60.0,
    }
    sql, args = bind("reap", params)
    async with connector._connection() as conn:
        row = await conn.fetchrow(sql, *args)
        assert row is not None and row["reaped"] == 1
        assert row["synchronous_commit"] == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_reap_goes_on_past_a_batch_whose_job_is_held(env: Env) -> None:
    """PostgreSQL skips an expired claim whose job a status change holds; the batch it was in
    was still full, so the pass goes on and reaps every other expired claim. (SQLite has one
    writer: no job is held while it reaps.)"""

    jobs = [await env.job() for _ in range(5)]
    for job in jobs:
        await env.store.claim_job(env.ws, env.agent, job.id, 30)
    expire_claims(env.url)
    with pgsync.connect(env.url) as holder:  # a transaction holding the first job's row
        holder.script("BEGIN")
        assert holder.fetch("SELECT 1 FROM job WHERE id = $1 FOR UPDATE", jobs[0].id) == [(1,)]
        result = await env.store.reap(2, 0)
        holder.script("ROLLBACK")
    assert result.requeued == 4
    assert _claim_rows(env) == 1
    assert (await env.store.reap(2, 0)).requeued == 1


async def test_max_reclaims_fails_the_job(env: Env) -> None:
    job = await env.job()
    for _ in range(2):
        await env.store.claim_next(env.ws, env.agent, 30)
        expire_claims(env.url)
        assert (await env.store.reap(500, 3)).requeued == 1
    await env.store.claim_next(env.ws, env.agent, 30)
    expire_claims(env.url)
    result = await env.store.reap(500, 3)
    assert (result.requeued, result.failed) == (0, 1)
    failed = await env.store.entities.get_job(env.ws, job.id)
    assert failed is not None and failed.status == JobStatus.FAILURE
    assert failed.message == "lease expired 3 times" and failed.completed_at is not None
    outcomes = [a.outcome for a in await env.store.list_attempts(env.ws, job.id)]
    assert outcomes == ["expired", "expired", "expired"]
    assert await env.store.claim_next(env.ws, env.agent, 30) is None


async def test_max_reclaims_one_fails_at_the_first_expiry(env: Env) -> None:
    job = await env.job()
    await env.store.claim_next(env.ws, env.agent, 30)
    expire_claims(env.url)
    assert (await env.store.reap(500, 1)).failed == 1
    failed = await env.store.entities.get_job(env.ws, job.id)
    assert failed is not None and failed.message == "lease expired 1 times"


# --- reapers racing ---------------------------------------------------------------------------


async def test_four_concurrent_reapers_requeue_each_job_exactly_once(env: Env) -> None:
    total = 200
    jobs = [await env.job() for _ in range(total)]
    while await env.store.claim_next(env.ws, env.agent, 30) is not None:
        pass
    assert expire_claims(env.url) == total

    async with stores(env.url, 4) as reapers:
        results = await asyncio.gather(*(r.reap(25, 0) for r in reapers))
    assert sum(r.requeued for r in results) == total
    assert sum(r.failed for r in results) == 0
    assert sql(env.url, "SELECT count(*) FROM job_claim") == [(0,)]
    per_job = sql(
        env.url,
        "SELECT job_id, count(*) FROM job_attempt WHERE outcome = 'expired' GROUP BY job_id",
    )
    assert len(per_job) == total and {n for _, n in per_job} == {1}
    queued, count = await list_jobs(
        env.store, env.ws, agent_id=env.agent, statuses=[JobStatus.QUEUED], limit=1000
    )
    assert count == total and {j.id for j in queued} == {j.id for j in jobs}


async def test_reapers_racing_heartbeats_and_completions_stay_consistent(env: Env) -> None:
    """Reaping while agents heartbeat or complete the same jobs: every job ends in exactly
    one consistent state (claim row ⇔ inProgress; a leased attempt has no open row: its row is
    written once, as it ends)."""
    jobs = [await env.job() for _ in range(30)]
    claims: list[ClaimedJob] = []
    while (claimed := await env.store.claim_next(env.ws, env.agent, 30)) is not None:
        claims.append(claimed)
    expire_claims(env.url)

    async def agent_work(store: Store, claim: ClaimedJob, n: int) -> None:
        try:
            if n % 2:
                await store.heartbeat(env.ws, claim.id, claim.claim_id, None)
            else:
                await set_status(
                    store, env.ws, claim.id, JobStatus.SUCCESSFUL, claim_id=claim.claim_id
                )
        except Exception as exc:  # lost the race against the reaper: must be a 409
            assert type(exc).__name__ == "ClaimLost", exc

    async with stores(env.url, 3) as (agents, reaper_a, reaper_b):
        await asyncio.gather(
            reaper_a.reap(5, 0),
            reaper_b.reap(5, 0),
            *(agent_work(agents, c, n) for n, c in enumerate(claims)),
        )
    rows = sql(
        env.url,
        "SELECT j.status, c.job_id IS NOT NULL,"
        " (SELECT count(*) FROM job_attempt t WHERE t.job_id = j.id AND t.ended_at IS NULL)"
        " FROM job j LEFT JOIN job_claim c ON c.job_id = j.id",
    )
    assert len(rows) == len(jobs)
    for status, has_claim, open_attempts in rows:
        if status == "inProgress":
            assert bool(has_claim) and open_attempts == 0, rows
        else:
            assert status in ("queued", "successful") and not has_claim and open_attempts == 0


# --- outage grace -----------------------------------------------------------------------------


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


# --- a deleted agent's claim (V1 parity) ------------------------------------------------------


async def test_an_in_flight_claim_of_a_deleted_agent_is_reaped(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 60)
    await env.job(env.other_agent)
    other = await env.store.claim_next(env.ws, env.other_agent, 60)
    assert other is not None
    assert await env.store.entities.delete_agent(env.ws, env.agent) is True

    # The claim row keeps the agent it was made with; the lease still works by claim id.
    claims, total = await env.store.list_claims(
        env.ws, agent_id=None, state=ClaimState.ALL, limit=10, offset=0
    )
    assert total == 2
    assert {c.job_id: c.job_agent_id for c in claims}[job.id] == env.agent
    beat = await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)
    assert beat.attempt == 1

    expire_claims(env.url)
    result = await env.store.reap(500, 0)
    assert (result.requeued, result.failed) == (2, 0)
    requeued = await env.store.entities.get_job(env.ws, job.id)
    assert (
        requeued is not None and requeued.status == JobStatus.QUEUED and requeued.agent_id is None
    )
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.outcome, a.job_agent_id) for a in attempts] == [
        (1, AttemptOutcome.EXPIRED, env.agent)
    ]
    assert await env.store.claim_next(env.ws, env.other_agent, 60) is not None  # its own
    with pytest.raises(ClaimLost):
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=claimed.claim_id)
