"""Status changes on both databases (``set_status``): fencing by claim id, an operator's writes
without one (any transition, V1 parity), a held claim kept as revoked until its holder lets go,
and completions, cancels and reaps racing."""

from __future__ import annotations

import asyncio
from collections import Counter
from uuid import UUID, uuid4

import pytest

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import AttemptOutcome, ClaimedJob, ClaimState, JobStatus
from jobagentctl.server.store import Store
from tests.fixtures.databases import (
    expire_claims,
    sql,
)
from tests.integration.store.conftest import Env, set_status, stores

pytestmark = pytest.mark.anyio


# --- status updates and fencing ---------------------------------------------------------------


def _claim_rows(env: Env) -> int:
    return int(sql(env.url, "SELECT count(*) FROM job_claim")[0][0])


async def test_complete_with_claim_id_and_idempotent_repeat(env: Env) -> None:
    job = await env.job(metadata={"keep": 1, "over": 1})
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    done = await env.status(
        job.id,
        JobStatus.SUCCESSFUL,
        claim_id=claimed.claim_id,
        message="ok",
        external_id="run-7",
        metadata={"over": 2, "new": {"a": 1}},
        agent_scope=env.agent,
        require_claim_id=True,
    )
    assert done.status == JobStatus.SUCCESSFUL and done.message == "ok"
    assert done.external_id == "run-7"
    assert done.metadata == {"keep": 1, "over": 2, "new": {"a": 1}}
    assert done.completed_at is not None and done.completed_at >= done.started_at  # type: ignore[operator]
    assert _claim_rows(env) == 0
    attempt = (await env.store.list_attempts(env.ws, job.id))[0]
    assert attempt.outcome == "completed" and attempt.ended_at == done.completed_at

    # A retried complete (same claim, same status) is a success that changes nothing.
    repeat = await env.status(
        job.id, JobStatus.SUCCESSFUL, claim_id=claimed.claim_id, message="retry"
    )
    assert repeat == done
    with pytest.raises(ClaimLost) as lost:
        await env.status(job.id, JobStatus.FAILURE, claim_id=claimed.claim_id)
    assert lost.value.details == {"jobStatus": "successful"}
    # Without a claim id the same terminal status again changes nothing (any other status is
    # applied: see test_any_transition_without_a_claim_id).
    assert (await env.status(job.id, JobStatus.SUCCESSFUL)).status == JobStatus.SUCCESSFUL
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored == done


async def test_wrong_claim_id_changes_nothing(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    with pytest.raises(ClaimMismatch) as mismatch:
        await env.status(job.id, JobStatus.FAILURE, claim_id=uuid4(), message="x")
    assert mismatch.value.details == {"jobStatus": "inProgress", "attempt": 1}
    stored = await env.store.entities.get_job(env.ws, job.id)
    assert stored is not None and stored.status == JobStatus.IN_PROGRESS and stored.message is None
    assert _claim_rows(env) == 1
    with pytest.raises(NotFound):
        await env.status(job.id, JobStatus.FAILURE, claim_id=claimed.claim_id, agent_scope=uuid4())
    with pytest.raises(NotFound):
        await env.status(uuid4(), JobStatus.FAILURE)


async def test_require_claim_id_binds_agent_keys_on_leased_jobs(env: Env) -> None:
    job = await env.job()
    await env.store.claim_job(env.ws, env.agent, job.id, 30)
    with pytest.raises(ValidationError):
        await env.status(job.id, JobStatus.SUCCESSFUL, agent_scope=env.agent, require_claim_id=True)
    # An operator (workspace key) may still act without it.
    done = await env.status(job.id, JobStatus.SUCCESSFUL, require_claim_id=True)
    assert done.status == JobStatus.SUCCESSFUL


async def test_cancel_closes_the_attempt_and_the_next_heartbeat_learns_it(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    cancelled = await env.status(job.id, JobStatus.CANCELLED, message="operator")
    assert cancelled.status == JobStatus.CANCELLED and cancelled.completed_at is not None
    assert (await env.store.list_attempts(env.ws, job.id))[0].outcome == "cancelled"
    with pytest.raises(ClaimLost) as lost:
        await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)
    assert lost.value.job_status == "cancelled"
    # The agent's late "cancelled" ack with its claim id is an idempotent success.
    ack = await env.status(job.id, JobStatus.CANCELLED, claim_id=claimed.claim_id)
    assert ack.status == JobStatus.CANCELLED


async def test_operator_requeue_without_claim_id(env: Env) -> None:
    job = await env.job()
    first = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    await env.status(job.id, JobStatus.QUEUED)
    assert (await env.store.list_attempts(env.ws, job.id))[0].outcome == "released"
    # Claimable once the holder lets go (see
    # test_requeue_of_a_held_claim_waits_for_its_holder_to_let_go).
    with pytest.raises(ClaimLost):
        await env.status(job.id, JobStatus.QUEUED, claim_id=first.claim_id)
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 30)
    assert claimed.attempt == 2


async def test_in_progress_status_sets_started_at(env: Env) -> None:
    job = await env.job()
    moved = await env.status(job.id, JobStatus.IN_PROGRESS)
    assert moved.status == JobStatus.IN_PROGRESS and moved.started_at is not None
    claims, total = await env.store.list_claims(
        env.ws, agent_id=None, state="unleased", limit=10, offset=0
    )
    assert total == 1 and claims[0].attempt is None and claims[0].claimed_at == moved.started_at


# --- a status write without a claim id takes any transition (V1 parity) -----------------------


@pytest.mark.parametrize("ending", [JobStatus.FAILURE, JobStatus.CANCELLED])
async def test_requeue_of_a_finished_job_and_its_next_attempt(env: Env, ending: JobStatus) -> None:
    job = await env.job()
    first = await env.store.claim_next(env.ws, env.agent, 60)
    assert first is not None and first.attempt == 1
    finished = await env.status(job.id, ending, claim_id=first.claim_id)
    assert finished.completed_at is not None

    requeued = await env.status(job.id, JobStatus.QUEUED)  # an operator, no claim id
    assert requeued.status == JobStatus.QUEUED
    assert requeued.completed_at is None  # no longer finished
    assert requeued.started_at == finished.started_at  # the last attempt's start, kept

    second = await env.store.claim_next(env.ws, env.agent, 60)
    assert second is not None and second.id == job.id and second.attempt == 2
    assert second.claim_id != first.claim_id
    assert second.started_at is not None and second.started_at >= finished.started_at  # type: ignore[operator]
    attempts = await env.store.list_attempts(env.ws, job.id)
    expected_first = AttemptOutcome.CANCELLED if ending == JobStatus.CANCELLED else "completed"
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, expected_first), (2, None)]

    # Writes with a claim id keep every fencing rule: the first attempt's id is stale.
    with pytest.raises(ClaimMismatch):
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=first.claim_id)
    done = await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=second.claim_id)
    assert done.status == JobStatus.SUCCESSFUL
    assert (
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=second.claim_id) == done
    )  # repeat
    with pytest.raises(ClaimLost):
        await env.status(job.id, JobStatus.FAILURE, claim_id=second.claim_id)


async def test_any_transition_without_a_claim_id(env: Env) -> None:
    job = await env.job()
    done = await env.status(job.id, JobStatus.SUCCESSFUL)
    assert done.completed_at is not None
    again = await env.status(job.id, JobStatus.SUCCESSFUL)  # a repeat changes nothing
    assert again == done
    failed = await env.status(job.id, JobStatus.FAILURE)  # terminal → another terminal
    assert failed.status == JobStatus.FAILURE and failed.completed_at is not None
    pending = await env.status(job.id, JobStatus.PENDING)  # terminal → not terminal
    assert pending.status == JobStatus.PENDING and pending.completed_at is None


# --- an operator's change of a held claim: revoked until the holder lets go -------------------


def _expire_revoked(url: str) -> None:
    """The revoked claims' leases one minute in the past, by the database clock."""
    if url.startswith("sqlite:"):
        sql(url, "UPDATE job_revoked_claim SET claim_expires_at = claim_expires_at - 3600")
    else:
        sql(url, "UPDATE job_revoked_claim SET claim_expires_at = now() - interval '1 minute'")


def _revoked_rows(env: Env) -> int:
    return int(sql(env.url, "SELECT count(*) FROM job_revoked_claim")[0][0])


async def _running(env: Env) -> ClaimedJob:
    job = await env.job()
    return await env.store.claim_job(env.ws, env.agent, job.id, 30)


async def test_requeue_of_a_held_claim_waits_for_its_holder_to_let_go(env: Env) -> None:
    first = await _running(env)
    requeued = await env.status(first.id, JobStatus.QUEUED, message="operator")
    assert requeued.status == JobStatus.QUEUED and requeued.claim_held is True

    # Not claimable, by id or by claim-next, and the long-poll's check does not count it.
    with pytest.raises(NotClaimable) as refused:
        await env.store.claim_job(env.ws, env.agent, first.id, 30)
    assert refused.value.details == {"jobStatus": "queued", "claimHeld": True}
    assert await env.store.claim_next(env.ws, env.agent, 30) is None
    assert await env.store.claim_batch(env.ws, env.agent, 30, 5) == []
    assert not await env.store.wait_for_job(env.agent, 0.0)

    # The holder learns at once; inspect-claims shows the claim as revoked.
    with pytest.raises(ClaimLost) as lost:
        await env.store.heartbeat(env.ws, first.id, first.claim_id, None)
    assert lost.value.job_status == "queued"
    claims, total = await env.store.list_claims(
        env.ws, agent_id=None, state=ClaimState.REVOKED, limit=10, offset=0
    )
    assert total == 1 and claims[0].claim_id == first.claim_id
    assert claims[0].state == ClaimState.REVOKED and claims[0].attempt == 1
    assert (await env.store.claim_stats())["revoked"] == 1

    # Its command gone, the holder reports with its claim id: refused, and the job is free.
    with pytest.raises(ClaimLost):
        await set_status(env.store, env.ws, first.id, JobStatus.QUEUED, claim_id=first.claim_id)
    assert _revoked_rows(env) == 0
    assert (await env.store.entities.get_job(env.ws, first.id)).claim_held is None  # type: ignore[union-attr]
    second = await env.store.claim_next(env.ws, env.agent, 30)
    assert second is not None and second.id == first.id and second.attempt == 2
    attempts = await env.store.list_attempts(env.ws, first.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "released"), (2, None)]


async def test_cancel_then_requeue_waits_too_and_an_ack_lets_go(env: Env) -> None:
    first = await _running(env)
    await env.status(first.id, JobStatus.CANCELLED)
    await env.status(first.id, JobStatus.QUEUED)
    assert await env.store.claim_next(env.ws, env.agent, 30) is None
    # A different claim id lets nothing go.
    other = await _running(env)
    with pytest.raises(ClaimLost):
        await set_status(env.store, env.ws, first.id, JobStatus.FAILURE, claim_id=other.claim_id)
    assert _revoked_rows(env) == 1
    with pytest.raises(ClaimLost):
        await set_status(env.store, env.ws, first.id, JobStatus.FAILURE, claim_id=first.claim_id)
    assert _revoked_rows(env) == 0
    again = await env.store.claim_next(env.ws, env.agent, 30)
    assert again is not None and again.id == first.id


async def test_an_expired_revoked_claim_is_reaped_and_the_job_claimable(env: Env) -> None:
    first = await _running(env)
    await env.status(first.id, JobStatus.QUEUED)
    assert (await env.store.reap(500, 1)).total == 0  # not expired: kept
    assert _revoked_rows(env) == 1
    _expire_revoked(env.url)
    result = await env.store.reap(500, 1)
    # The reaper frees the job; nothing is counted as an expiry (the attempt ended released).
    assert (result.requeued, result.failed) == (0, 0)
    assert _revoked_rows(env) == 0
    assert await env.store.wait_for_job(env.agent, 0.0)
    again = await env.store.claim_next(env.ws, env.agent, 30)
    assert again is not None and again.id == first.id and again.attempt == 2


async def test_force_makes_the_job_claimable_at_once(env: Env) -> None:
    first = await _running(env)
    await set_status(env.store, env.ws, first.id, JobStatus.QUEUED, force=True)
    assert _revoked_rows(env) == 0
    forced = await env.store.claim_next(env.ws, env.agent, 30)
    assert forced is not None and forced.id == first.id
    # A requeue already waiting is forced the same way.
    await env.status(first.id, JobStatus.QUEUED)
    assert _revoked_rows(env) == 1
    await set_status(env.store, env.ws, first.id, JobStatus.QUEUED, force=True)
    assert _revoked_rows(env) == 0
    assert await env.store.claim_next(env.ws, env.agent, 30) is not None


async def test_the_holders_own_release_and_unleased_jobs_keep_no_revoked_claim(env: Env) -> None:
    first = await _running(env)
    await set_status(env.store, env.ws, first.id, JobStatus.QUEUED, claim_id=first.claim_id)
    job = await env.job()
    await env.store.claim_job(env.ws, env.agent, job.id, None)
    await env.status(job.id, JobStatus.QUEUED)
    assert _revoked_rows(env) == 0
    assert len(await env.store.claim_batch(env.ws, env.agent, 30, 5)) == 2


@pytest.mark.parametrize("ended_as", [JobStatus.SKIPPED, JobStatus.SUCCESSFUL, JobStatus.FAILURE])
async def test_the_holders_release_after_an_operator_ended_then_requeued_lets_go(
    env: Env, ended_as: JobStatus
) -> None:
    # Found by the lease model: an operator ends a running job with a terminal status (its
    # attempt closes `completed`), then requeues it. The holder's let-go, `run`'s release
    # (queued, with its claim id), finds the job queued already: answered as a repeat, not
    # refused, and the job used to keep waiting for the lease to run out.
    first = await _running(env)
    await env.status(first.id, ended_as)
    requeued = await env.status(first.id, JobStatus.QUEUED)
    assert requeued.claim_held is True
    with pytest.raises(NotClaimable) as refused:
        await env.store.claim_job(env.ws, env.agent, first.id, 30)
    assert refused.value.details == {"jobStatus": "queued", "claimHeld": True}

    released = await set_status(
        env.store, env.ws, first.id, JobStatus.QUEUED, claim_id=first.claim_id,
        agent_scope=env.agent,
    )  # fmt: skip
    assert released.status == JobStatus.QUEUED
    assert _revoked_rows(env) == 0
    assert await env.store.wait_for_job(env.agent, 0.0)
    again = await env.store.claim_job(env.ws, env.agent, first.id, 30)
    assert again.attempt == 2 and again.claim_id != first.claim_id
    attempts = await env.store.list_attempts(env.ws, first.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "completed"), (2, None)]


async def test_the_holders_own_report_of_the_status_an_operator_set_lets_go(env: Env) -> None:
    # The command finished as the operator marked it: the holder's report is a repeat, and its
    # command has ended, so a later requeue does not wait for the lease.
    first = await _running(env)
    await env.status(first.id, JobStatus.SUCCESSFUL)
    assert _revoked_rows(env) == 1
    await set_status(
        env.store, env.ws, first.id, JobStatus.SUCCESSFUL, claim_id=first.claim_id,
        agent_scope=env.agent,
    )  # fmt: skip
    assert _revoked_rows(env) == 0
    await env.status(first.id, JobStatus.QUEUED)
    again = await env.store.claim_next(env.ws, env.agent, 30)
    assert again is not None and again.id == first.id and again.attempt == 2


# --- completions, cancels and reaps racing ----------------------------------------------------


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
