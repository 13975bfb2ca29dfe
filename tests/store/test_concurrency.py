"""Real concurrency on both databases: several store instances on one database (each with its
own connections, like server replicas or processes) racing for the same rows."""

from __future__ import annotations

import asyncio
from collections import Counter
from uuid import UUID

import pytest

from jobagentctl.errors import NotClaimable
from jobagentctl.models import ClaimedJob, JobStatus
from jobagentctl.server.store import Store
from tests.fixtures.databases import expire_claims, sql
from tests.store.conftest import Env, stores

pytestmark = pytest.mark.anyio


async def test_ten_concurrent_claims_of_one_job_one_wins(env: Env) -> None:
    job = await env.job()
    async with stores(env.url, 10) as claimers:
        results = await asyncio.gather(
            *(c.claim_job(env.ws, env.agent, job.id, 30) for c in claimers),
            return_exceptions=True,
        )
    winners = [r for r in results if isinstance(r, ClaimedJob)]
    losers = [r for r in results if isinstance(r, NotClaimable)]
    assert len(winners) == 1, results
    assert len(losers) == 9, results
    assert all(exc.details == {"jobStatus": "inProgress"} for exc in losers)
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.claim_id) for a in attempts] == [(1, winners[0].claim_id)]
    assert sql(env.url, "SELECT count(*) FROM job_claim") == [(1,)]


async def test_concurrent_claim_next_never_hands_out_a_job_twice(env: Env) -> None:
    jobs = [await env.job() for _ in range(20)]

    async def drain(claimer: Store) -> list[UUID]:
        got: list[UUID] = []
        while (claimed := await claimer.claim_next(env.ws, env.agent, 30)) is not None:
            got.append(claimed.id)
        return got

    async with stores(env.url, 8) as claimers:
        per_claimer = await asyncio.gather(*(drain(c) for c in claimers))
    counts = Counter(job_id for got in per_claimer for job_id in got)
    assert set(counts) == {j.id for j in jobs}
    assert set(counts.values()) == {1}
    # Each claimer took its jobs oldest first.
    order = {j.id: n for n, j in enumerate(jobs)}
    for got in per_claimer:
        assert [order[j] for j in got] == sorted(order[j] for j in got)
    attempts = sql(env.url, "SELECT count(*), max(attempt) FROM job_attempt")
    assert attempts == [(20, 1)]


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
    queued, count = await env.store.list_jobs(
        env.ws,
        agent_id=env.agent,
        statuses=[JobStatus.QUEUED],
        include_dispatch_context=False,
        limit=1000,
        offset=0,
    )
    assert count == total and {j.id for j in queued} == {j.id for j in jobs}


async def test_reapers_racing_heartbeats_and_completions_stay_consistent(env: Env) -> None:
    """Reaping while agents heartbeat or complete the same jobs: every job ends in exactly
    one consistent state (claim row ⇔ inProgress with an open attempt)."""
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
                await store.update_status(
                    env.ws,
                    claim.id,
                    JobStatus.SUCCESSFUL,
                    claim_id=claim.claim_id,
                    message=None,
                    external_id=None,
                    metadata=None,
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
            assert bool(has_claim) and open_attempts == 1, rows
        else:
            assert status in ("queued", "successful") and not has_claim and open_attempts == 0
