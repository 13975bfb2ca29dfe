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
from tests.integration.store.conftest import Env, list_jobs, set_status, stores

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
    # Each is attempt 1, running: a claim row each, no attempt row until the attempt ends.
    assert sql(env.url, "SELECT count(*), max(attempt) FROM job_claim") == [(20, 1)]
    assert sql(env.url, "SELECT count(*) FROM job_attempt") == [(0,)]


async def test_concurrent_claim_batches_never_hand_out_a_job_twice(env: Env) -> None:
    jobs = [await env.job() for _ in range(40)]

    async def drain(claimer: Store) -> list[list[UUID]]:
        batches: list[list[UUID]] = []
        while batch := await claimer.claim_batch(env.ws, env.agent, 30, 3):
            batches.append([c.id for c in batch])
        return batches

    async with stores(env.url, 6) as claimers:
        per_claimer = await asyncio.gather(*(drain(c) for c in claimers))
    counts = Counter(job_id for got in per_claimer for batch in got for job_id in batch)
    assert set(counts) == {j.id for j in jobs}
    assert set(counts.values()) == {1}
    order = {j.id: n for n, j in enumerate(jobs)}
    for got in per_claimer:
        for batch in got:
            assert 1 <= len(batch) <= 3
            assert [order[j] for j in batch] == sorted(order[j] for j in batch)
    # One claim row per job, each with a claim id of its own.
    assert sql(env.url, "SELECT count(*), count(DISTINCT claim_id) FROM job_claim") == [(40, 40)]


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


async def test_complete_cancel_and_reap_racing_end_each_attempt_once(env: Env) -> None:
    """The one-statement complete (claim row, then job) against an operator's cancel (the
    locked path: claim row, then job) and two reapers (SKIP LOCKED), on the same jobs at once:
    no deadlock (PostgreSQL would abort one side with an error, and count it), no refusal but
    the agent's 409, and each attempt ended exactly once, by whoever deleted its claim row."""
    jobs = [await env.job() for _ in range(60)]
    claims: list[ClaimedJob] = []
    while (claimed := await env.store.claim_next(env.ws, env.agent, 30)) is not None:
        claims.append(claimed)
    assert len(claims) == len(jobs)
    expire_claims(env.url, [c.id for c in claims[::2]])  # half of them the reapers may take
    completed: set[UUID] = set()

    async def agent(store: Store, claim: ClaimedJob) -> None:
        try:
            await set_status(
                store,
                env.ws,
                claim.id,
                JobStatus.SUCCESSFUL,
                claim_id=claim.claim_id,
                message="done",
                metadata={"by": "agent"},
                agent_scope=env.agent,
            )
        except Exception as exc:  # the operator or a reaper ended the attempt first
            assert type(exc).__name__ == "ClaimLost", exc
        else:
            completed.add(claim.id)

    async def operator(store: Store, claim: ClaimedJob) -> None:
        await set_status(store, env.ws, claim.id, JobStatus.CANCELLED, message="cancelled")

    async def reaper(store: Store) -> int:
        requeued = 0
        for _ in range(5):
            requeued += (await store.reap(3, 0)).requeued
            await asyncio.sleep(0)
        return requeued

    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    before = sql(env.url, deadlocks)[0][0] if env.url.startswith("postgres") else 0
    wide = {"max_size": 8} if env.url.startswith("postgres") else {}
    async with stores(env.url, 4, **wide) as (agents, operators, reaper_a, reaper_b):
        work = [
            asyncio.gather(agent(agents, c), operator(operators, c))  # the same job at once
            for c in claims
        ]
        # The reapers in a gather of their own, so that their counts keep their type.
        reaped, _ = await asyncio.gather(
            asyncio.gather(reaper(reaper_a), reaper(reaper_b)), asyncio.gather(*work)
        )
    if env.url.startswith("postgres"):
        assert sql(env.url, deadlocks)[0][0] == before  # the backends flushed as they closed
    requeued = reaped[0] + reaped[1]
    assert sql(env.url, "SELECT count(*) FROM job_claim") == [(0,)]
    rows = sql(
        env.url,
        "SELECT t.job_id, t.attempt, t.outcome, t.ended_at IS NOT NULL FROM job_attempt t",
    )
    ended = {str(job_id): (attempt, outcome, closed) for job_id, attempt, outcome, closed in rows}
    assert len(rows) == len(ended) == len(jobs), rows  # one row per attempt, each written once
    outcomes = Counter(outcome for _, outcome, _ in ended.values())
    assert {attempt for attempt, _, _ in ended.values()} == {1}
    assert all(closed for _, _, closed in ended.values())
    assert outcomes["completed"] == len(completed)
    assert outcomes["expired"] == requeued
    assert outcomes["completed"] + outcomes["cancelled"] + outcomes["expired"] == len(jobs)
    for claim in claims:  # completed by the agent ⇔ its attempt's row says so
        assert (ended[str(claim.id)][1] == "completed") == (claim.id in completed)
    # Every job was cancelled last (the operator's write applies whatever came before).
    statuses = sql(env.url, "SELECT DISTINCT status FROM job")
    assert statuses == [("cancelled",)]
