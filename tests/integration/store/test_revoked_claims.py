"""An operator's status change on a job whose claim is still held, on both databases: the claim
is kept as revoked and the job is not claimable until the holder lets go (reports with its
claim id), the lease runs out (the reaper), or the operator forces it."""

from __future__ import annotations

import pytest

from jobagentctl.errors import ClaimLost, NotClaimable
from jobagentctl.models import ClaimedJob, ClaimState, JobStatus
from tests.fixtures.databases import sql
from tests.integration.store.conftest import Env, set_status

pytestmark = pytest.mark.anyio


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
