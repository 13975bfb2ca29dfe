"""Leases on both databases: claim (by id, next, in batches), heartbeat, release, and what
inspect-claims, the attempt trail and the claim stats read; claims racing from several stores."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from uuid import UUID, uuid4

import pytest

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import ClaimedJob, JobStatus
from jobagentctl.server.store import Store
from tests.fixtures.databases import expire_claims, sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, stores

pytestmark = pytest.mark.anyio


# --- claim ------------------------------------------------------------------------------------


def _claim_rows(env: Env) -> int:
    return int(sql(env.url, "SELECT count(*) FROM job_claim")[0][0])


async def test_claim_flips_to_in_progress_with_lease_and_attempt(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert isinstance(claimed, ClaimedJob)
    assert claimed.id == job.id and claimed.status == JobStatus.IN_PROGRESS
    assert claimed.started_at is not None and claimed.claimed_at == claimed.started_at
    assert claimed.attempt == 1 and claimed.lease_seconds == 30 and claimed.claim_id is not None
    assert claimed.claim_expires_at == claimed.claimed_at + timedelta(seconds=30)
    assert claimed.dispatch_context == {}

    attempts = await env.store.list_attempts(env.ws, job.id)
    assert len(attempts) == 1
    first = attempts[0]
    assert (first.attempt, first.claim_id, first.outcome, first.ended_at) == (
        1,
        claimed.claim_id,
        None,
        None,
    )
    assert first.job_agent_id == env.agent and first.claimed_at == claimed.claimed_at
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.status == JobStatus.IN_PROGRESS

    with pytest.raises(NotClaimable) as again:
        await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert again.value.details == {"jobStatus": "inProgress"}


async def test_claim_of_unknown_or_foreign_jobs_is_not_found(env: Env) -> None:
    job = await env.job()
    with pytest.raises(NotFound):
        await env.store.claim_job(env.ws, env.agent, uuid4(), 30)
    with pytest.raises(NotFound):  # another agent's job
        await env.store.claim_job(env.ws, env.other_agent, job.id, 30)
    with pytest.raises(NotFound):  # another workspace
        await env.store.claim_job(
            await env.store.entities.create_workspace("o"), env.agent, job.id, 30
        )
    with pytest.raises(ValidationError):
        await env.store.claim_job(env.ws, env.agent, job.id, 0)
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.status == JobStatus.QUEUED


async def test_unleased_claim_records_no_claim_row_but_an_attempt(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, None)
    assert claimed.claim_id is None and claimed.lease_seconds is None
    assert claimed.claim_expires_at is None
    assert claimed.attempt == 1 and claimed.claimed_at is not None
    assert _claim_rows(env) == 0
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.claim_id) for a in attempts] == [(1, None)]
    with pytest.raises(ClaimLost) as lost:  # nothing to heartbeat
        await env.store.heartbeat(env.ws, job.id, None, None)
    assert lost.value.details == {"jobStatus": "inProgress"}
    done = await env.status(job.id, JobStatus.SUCCESSFUL)
    assert done.status == JobStatus.SUCCESSFUL
    assert (await env.store.list_attempts(env.ws, job.id))[0].outcome == "completed"


async def test_claim_next_takes_the_oldest_queued_job_of_the_agent(env: Env) -> None:
    await env.job(agent=env.other_agent)
    jobs = [await env.job() for _ in range(5)]
    await env.store.claim_job(env.ws, env.agent, jobs[0].id, None)
    got = [await env.store.claim_next(env.ws, env.agent, 60) for _ in range(4)]
    assert [c.id for c in got if c is not None] == [j.id for j in jobs[1:]]
    assert all(c is not None and c.lease_seconds == 60 and c.attempt == 1 for c in got)
    assert await env.store.claim_next(env.ws, env.agent, 60) is None
    # Another workspace sees nothing of this agent.
    other_ws = await env.store.entities.create_workspace("o")
    assert await env.store.claim_next(other_ws, env.other_agent, 5) is None


async def test_claim_next_unleased(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_next(env.ws, env.agent, None)
    assert claimed is not None and claimed.id == job.id
    assert claimed.claim_id is None and claimed.claim_expires_at is None and claimed.attempt == 1


async def test_claim_batch_takes_the_oldest_jobs_each_with_its_own_claim(env: Env) -> None:
    await env.job(agent=env.other_agent)
    jobs = [await env.job() for _ in range(5)]
    first = await env.store.claim_batch(env.ws, env.agent, 60, 3)
    assert [c.id for c in first] == [j.id for j in jobs[:3]]
    assert len({c.claim_id for c in first}) == 3 and None not in {c.claim_id for c in first}
    assert all(c.lease_seconds == 60 and c.attempt == 1 for c in first)
    assert all(c.status == JobStatus.IN_PROGRESS for c in first)
    rest = await env.store.claim_batch(env.ws, env.agent, 60, 3)
    assert [c.id for c in rest] == [j.id for j in jobs[3:]]
    assert await env.store.claim_batch(env.ws, env.agent, 60, 3) == []
    assert _claim_rows(env) == 5
    # Fencing is per job: one claim's id does not complete another job of the batch.
    with pytest.raises((ClaimMismatch, ClaimLost)):
        await env.status(first[1].id, JobStatus.SUCCESSFUL, claim_id=first[0].claim_id)
    done = await env.status(first[1].id, JobStatus.SUCCESSFUL, claim_id=first[1].claim_id)
    assert done.status == JobStatus.SUCCESSFUL
    beat = await env.store.heartbeat(env.ws, first[0].id, first[0].claim_id, None)
    assert beat.claim_id == first[0].claim_id


async def test_claim_batch_unleased_and_limits(env: Env) -> None:
    jobs = [await env.job() for _ in range(2)]
    got = await env.store.claim_batch(env.ws, env.agent, None, 10)
    assert [c.id for c in got] == [j.id for j in jobs]
    assert all(c.claim_id is None and c.attempt == 1 for c in got)
    assert _claim_rows(env) == 0
    assert [a.attempt for a in await env.store.list_attempts(env.ws, jobs[1].id)] == [1]
    with pytest.raises(ValidationError):
        await env.store.claim_batch(env.ws, env.agent, 60, 0)
    # Another workspace's agent id claims nothing here.
    other_ws = await env.store.entities.create_workspace("o")
    await env.job()
    assert await env.store.claim_batch(other_ws, env.agent, 60, 5) == []


# --- claims racing from several stores --------------------------------------------------------


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


# --- heartbeat --------------------------------------------------------------------------------


async def test_heartbeat_extends_the_claim_only(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert claimed.claim_expires_at is not None
    beat = await env.store.heartbeat(env.ws, job.id, claimed.claim_id, 120, agent_scope=env.agent)
    assert (beat.job_id, beat.claim_id, beat.attempt, beat.lease_seconds) == (
        job.id,
        claimed.claim_id,
        1,
        120,
    )
    assert beat.claim_expires_at > claimed.claim_expires_at
    # No claim_id and no new lease: keeps the lease length.
    again = await env.store.heartbeat(env.ws, job.id, None, None)
    assert again.lease_seconds == 120 and again.claim_expires_at >= beat.claim_expires_at
    # The claim's agent comes back on the store's record (for presence), whoever asked.
    assert beat.job_agent_id == again.job_agent_id == env.agent
    # Write locality: the job row is untouched by heartbeats.
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.updated_at == claimed.updated_at


async def test_heartbeat_revives_an_expired_claim_not_yet_reaped(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert expire_claims(env.url, [job.id]) == 1
    claims, _ = await env.store.list_claims(
        env.ws, agent_id=None, state="expired", limit=10, offset=0
    )
    assert [c.job_id for c in claims] == [job.id]
    beat = await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)
    assert beat.attempt == 1
    active, _ = await env.store.list_claims(
        env.ws, agent_id=None, state="active", limit=10, offset=0
    )
    assert [c.job_id for c in active] == [job.id]
    assert await env.store.reap(500, 0) == (await env.store.reap(500, 0))  # nothing to reap
    assert (await env.store.reap(500, 0)).total == 0


async def test_heartbeat_errors_carry_details(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    with pytest.raises(ClaimMismatch) as mismatch:
        await env.store.heartbeat(env.ws, job.id, uuid4(), None)
    assert mismatch.value.details == {"jobStatus": "inProgress", "attempt": 1}
    with pytest.raises(NotFound):
        await env.store.heartbeat(env.ws, uuid4(), None, None)
    with pytest.raises(NotFound):
        await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None, env.other_agent)
    with pytest.raises(NotFound):
        await env.store.heartbeat(
            await env.store.entities.create_workspace("o"), job.id, None, None
        )
    with pytest.raises(ValidationError):
        await env.store.heartbeat(env.ws, job.id, claimed.claim_id, 0)

    await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=claimed.claim_id)
    with pytest.raises(ClaimLost) as lost:
        await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)
    assert lost.value.details == {"jobStatus": "successful"}
    assert lost.value.job_status == "successful"


# --- release ----------------------------------------------------------------------------------


async def test_release_requeues_at_once_and_opens_a_new_attempt(env: Env) -> None:
    job = await env.job()
    first = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    released = await env.status(job.id, JobStatus.QUEUED, claim_id=first.claim_id)
    assert released.status == JobStatus.QUEUED
    assert _claim_rows(env) == 0
    second = await env.store.claim_next(env.ws, env.agent, 30)
    assert second is not None and second.id == job.id and second.attempt == 2
    assert second.claim_id != first.claim_id
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "released"), (2, None)]
    # The first attempt's claim id is fenced off now.
    with pytest.raises(ClaimMismatch):
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=first.claim_id)
    with pytest.raises(ClaimMismatch):
        await env.store.heartbeat(env.ws, job.id, first.claim_id, None)


# --- inspect-claims, attempts, stats ----------------------------------------------------------


async def test_list_claims_states_filters_and_paging(env: Env) -> None:
    active = await env.store.claim_job(env.ws, env.agent, (await env.job()).id, 40)
    expired = await env.store.claim_job(env.ws, env.agent, (await env.job()).id, 40)
    unleased = await env.store.claim_job(env.ws, env.agent, (await env.job()).id, None)
    foreign = await env.store.claim_job(
        env.ws, env.other_agent, (await env.job(agent=env.other_agent)).id, 40
    )
    await env.job()  # queued: not a claim
    expire_claims(env.url, [expired.id])

    everything, total = await env.store.list_claims(
        env.ws, agent_id=None, state="all", limit=50, offset=0
    )
    assert total == 4
    assert [c.job_id for c in everything] == [active.id, expired.id, unleased.id, foreign.id]
    by_id = {c.job_id: c for c in everything}
    assert [by_id[j.id].state for j in (active, expired, unleased, foreign)] == [
        "active",
        "expired",
        "unleased",
        "active",
    ]
    a = by_id[active.id]
    assert (a.claim_id, a.attempt, a.lease_seconds, a.claimed_at) == (
        active.claim_id,
        1,
        40,
        active.claimed_at,
    )
    assert a.claim_expires_at is not None and a.last_heartbeat_at == a.claim_expires_at - timedelta(
        seconds=40
    )
    u = by_id[unleased.id]
    assert (u.claim_id, u.claim_expires_at, u.lease_seconds, u.last_heartbeat_at) == (
        None,
        None,
        None,
        None,
    )
    assert u.attempt == 1 and u.claimed_at == unleased.claimed_at

    for state, expected in (
        ("active", [active.id, foreign.id]),
        ("expired", [expired.id]),
        ("unleased", [unleased.id]),
    ):
        rows, total = await env.store.list_claims(
            env.ws, agent_id=None, state=state, limit=50, offset=0
        )
        assert [c.job_id for c in rows] == expected and total == len(expected), state
    mine, total = await env.store.list_claims(
        env.ws, agent_id=env.agent, state="all", limit=1, offset=1
    )
    assert total == 3 and [c.job_id for c in mine] == [expired.id]
    assert await env.store.list_claims(env.ws, agent_id=None, state="all", limit=10, offset=10) == (
        [],
        4,
    )
    with pytest.raises(ValidationError):
        await env.store.list_claims(env.ws, agent_id=None, state="stuck", limit=1, offset=0)

    stats = await env.store.claim_stats()
    assert (stats["active"], stats["expired"], stats["unleased"]) == (2, 1, 1)
    assert stats["oldest_age_seconds"] >= 0


async def test_list_attempts_scopes(env: Env) -> None:
    job = await env.job()
    assert await env.store.list_attempts(env.ws, job.id) == []
    await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert len(await env.store.list_attempts(env.ws, job.id, agent_scope=env.agent)) == 1
    with pytest.raises(NotFound):
        await env.store.list_attempts(env.ws, job.id, agent_scope=env.other_agent)
    with pytest.raises(NotFound):
        await env.store.list_attempts(env.ws, uuid4())


async def test_claim_stats_on_an_empty_database(env: Env) -> None:
    assert await env.store.claim_stats() == {
        "active": 0.0,
        "expired": 0.0,
        "unleased": 0.0,
        "revoked": 0.0,
        "oldest_age_seconds": 0.0,
    }


async def test_a_one_second_lease_lapses_by_the_database_clock(env: Env) -> None:
    """No raw UPDATE here: the lease arithmetic of each dialect (epoch seconds on SQLite,
    intervals on PostgreSQL) lets a 1 s lease expire on its own."""
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 1)
    assert claimed.claimed_at is not None
    assert claimed.claim_expires_at == claimed.claimed_at + timedelta(seconds=1)

    async def expired() -> bool:
        rows, _ = await env.store.list_claims(
            env.ws, agent_id=None, state="expired", limit=10, offset=0
        )
        return [c.job_id for c in rows] == [job.id]

    await await_until(expired, what="the 1 s lease to lapse")
    assert (await env.store.reap(500, 0)).requeued == 1
    again = await env.store.claim_next(env.ws, env.agent, 3600)
    assert again is not None and again.attempt == 2
    # A long lease is not judged expired.
    assert (await env.store.reap(500, 0)).total == 0
