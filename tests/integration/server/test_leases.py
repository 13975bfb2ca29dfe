"""V2 lease behaviours in-process: claim, heartbeat, fencing, cancel, release, reap.

The reaper is swept explicitly (``api.reap()``) except where the app's lifespan runs it; the
timing of the real reaper process is measured in tests/system/server/test_live.py.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from jobagentctl.server.reaper import Reaper
from jobagentctl.server.store import open_store
from tests.fixtures.server_app import Api, make_api

pytestmark = pytest.mark.anyio


async def _claimed(api: Api, lease: int = 30, **agent_config: Any) -> tuple[str, dict[str, Any]]:
    agent = await api.agent(config=agent_config or None)
    job = await api.enqueue(agent)
    r = await api.claim(agent, job["id"], {"leaseSeconds": lease})
    assert r.status_code == 200, r.text
    return agent, r.json()


async def test_claim_returns_claim_id_lease_and_attempt(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    r = await api.claim_next(agent, {"leaseSeconds": 30})
    assert r.status_code == 200
    claimed = r.json()
    assert claimed["id"] == job["id"]
    uuid.UUID(claimed["claimId"])
    assert claimed["leaseSeconds"] == 30
    assert claimed["attempt"] == 1
    assert claimed["claimedAt"]
    assert claimed["claimExpiresAt"] > claimed["claimedAt"]
    (claim,) = await api.claims(state="active")
    assert claim["claimId"] == claimed["claimId"]
    assert claim["state"] == "active"


async def test_lease_resolution_request_config_default_and_clamp(api: Api) -> None:
    plain = await api.agent("plain")
    configured = await api.agent("configured", config={"leaseSeconds": 42})

    async def lease_of(agent: str, body: Any, *, by_id: bool) -> Any:
        job = await api.enqueue(agent)
        if by_id:
            r = await api.claim(agent, job["id"], body)
        else:
            r = await api.claim_next(agent, body)
        assert r.status_code == 200, r.text
        assert r.json()["id"] == job["id"]
        return r.json()["leaseSeconds"]

    # V1 claim by id: no body and no agent config → unleased; config → its lease.
    assert await lease_of(plain, None, by_id=True) is None
    assert await lease_of(configured, None, by_id=True) == 42
    # Explicit request wins; 0 means unleased; values are clamped into [1, 3600] here.
    assert await lease_of(plain, {"leaseSeconds": 7}, by_id=True) == 7
    assert await lease_of(configured, {"leaseSeconds": 0}, by_id=True) is None
    assert await lease_of(plain, {"leaseSeconds": 999999}, by_id=True) == 3600
    # V2 claim-next: always leased, server default when nothing says otherwise.
    assert await lease_of(plain, None, by_id=False) == 60
    assert await lease_of(configured, {}, by_id=False) == 42
    assert await lease_of(plain, {"leaseSeconds": 0}, by_id=False) is None


# Agent configs a V1 claim by id reads its lease from, as any JSON may hold them.
_CONFIGS: list[Any] = [
    {"leaseSeconds": 42},
    {"leaseSeconds": 42.9},  # truncated
    {"leaseSeconds": 0.5},  # positive: truncated to 0, then clamped up to the minimum
    {"leaseSeconds": 0},
    {"leaseSeconds": -5},
    {"leaseSeconds": 10**12},  # clamped down to the maximum
    {"leaseSeconds": 1e300},
    {"leaseSeconds": 3},  # under the minimum
    {"leaseSeconds": "30"},  # not a number
    {"leaseSeconds": True},  # not a lease length
    {"leaseSeconds": None},
    {"leaseSeconds": [30]},
    {"leaseSeconds": {"s": 30}},
    {"other": 1},
    {},
]


async def test_a_v1_claims_configured_lease_is_resolve_leases(database_url: str) -> None:
    """A V1 claim by id without a body takes its lease from the agent's config in the claim
    statement itself (no lookup of the agent first): the lease granted is the one
    ``resolve_lease`` decides for that config, whatever the config holds, on both databases."""
    from jobagentctl.server.service import resolve_lease

    async for api in make_api(database_url, min_lease_seconds=5, max_lease_seconds=600):
        for config in _CONFIGS:
            agent = await api.agent(config=config)
            job = await api.enqueue(agent)
            r = await api.claim(agent, job["id"])
            assert r.status_code == 200, (config, r.text)
            expected = resolve_lease(api.settings, None, config, claim_next=False)
            assert r.json()["leaseSeconds"] == expected, config
            assert (r.json()["claimId"] is None) == (expected is None), config
            # The attempt as before: a leased one is a claim row, an unleased one its open row.
            (attempt,) = await api.attempts(job["id"])
            assert attempt["claimId"] == r.json()["claimId"], config


async def test_a_v1_claim_for_an_unknown_agent_is_the_agents_404(api: Api) -> None:
    """Not "job not found": the agent's own 404, as when the agent was looked up before the
    claim (now only on the failure path)."""
    agent = str(uuid.uuid4())
    r = await api.claim(agent, str(uuid.uuid4()))
    assert r.status_code == 404, r.text
    assert r.json()["details"] == {"jobAgentId": agent}, r.json()
    known = await api.agent()
    r = await api.claim(known, str(uuid.uuid4()))
    assert r.status_code == 404, r.text
    assert r.json()["message"] == "job not found", r.json()


async def test_lease_is_clamped_to_the_server_minimum(database_url: str) -> None:
    async for api in make_api(database_url, min_lease_seconds=5):
        _agent, claimed = await _claimed(api, lease=1)
        assert claimed["leaseSeconds"] == 5
        r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"], "leaseSeconds": 2})
        assert r.json()["leaseSeconds"] == 5


async def test_heartbeat_extends_the_claim_only(api: Api) -> None:
    _agent, claimed = await _claimed(api, lease=30)
    before = await api.job(claimed["id"])
    r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"]})
    assert r.status_code == 200
    beat = r.json()
    assert beat == {
        "jobId": claimed["id"],
        "claimId": claimed["claimId"],
        "attempt": 1,
        "leaseSeconds": 30,
        "claimExpiresAt": beat["claimExpiresAt"],
    }
    assert beat["claimExpiresAt"] >= claimed["claimExpiresAt"]
    # The job row is not touched by heartbeats (write locality).
    assert (await api.job(claimed["id"]))["updatedAt"] == before["updatedAt"]
    # Without claimId (an operator or a V1-style agent) a heartbeat is accepted too.
    assert (await api.heartbeat(claimed["id"])).status_code == 200


async def test_heartbeats_keep_a_job_claimed_past_several_leases(database_url: str) -> None:
    async for api in make_api(database_url, reap_interval=0.1):
        async with api.app.framework.router.lifespan_context(
            api.app.framework
        ):  # runs the real reaper task
            # A 2 s lease, a heartbeat every 0.2 s: a busy machine has ten beats of headroom
            # before a late beat would lose the lease.
            _agent, claimed = await _claimed(api, lease=2)
            loop = asyncio.get_running_loop()
            started = loop.time()
            reaper = api.app.framework.state.reaper
            beats = 0
            # Until the claim has outlived 2.5 leases, with at least 5 beats and 10 reaper
            # sweeps (counted, not assumed from elapsed time) while it held.
            while beats < 5 or reaper.passes <= 10 or loop.time() < started + 5.0:
                r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"]})
                assert r.status_code == 200, r.text
                beats += 1
                assert loop.time() < started + 120, "the reaper never swept 10 times"
                await asyncio.sleep(0.2)
            job = await api.job(claimed["id"])
            assert job["status"] == "inProgress"
            assert [a["outcome"] for a in await api.attempts(claimed["id"])] == [None]


async def test_expired_claim_requeued_then_attempt_two_with_new_claim_id(api: Api) -> None:
    agent, claimed = await _claimed(api, lease=30)
    await api.expire(claimed["id"])
    result = await api.reap()
    assert result.requeued == 1
    assert result.failed == 0
    assert (await api.job(claimed["id"]))["status"] == "queued"
    assert await api.claims() == []

    r = await api.claim_next(agent, {"leaseSeconds": 30})
    assert r.status_code == 200
    second = r.json()
    assert second["attempt"] == 2
    assert second["claimId"] != claimed["claimId"]
    outcomes = [(a["attempt"], a["outcome"]) for a in await api.attempts(claimed["id"])]
    assert outcomes == [(1, "expired"), (2, None)]


async def test_stale_claim_id_is_409_and_changes_nothing(api: Api) -> None:
    agent, first = await _claimed(api, lease=30)
    await api.expire(first["id"])
    assert (await api.reap()).requeued == 1
    second = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    before = await api.job(first["id"])
    (claim_before,) = await api.claims()

    r = await api.heartbeat(first["id"], {"claimId": first["claimId"]})
    assert r.status_code == 409
    assert r.json()["code"] == "CLAIM_MISMATCH"
    assert r.json()["details"]["jobStatus"] == "inProgress"
    r = await api.status(first["id"], {"status": "successful", "claimId": first["claimId"]})
    assert r.status_code == 409
    assert r.json()["code"] == "CLAIM_MISMATCH"

    assert await api.job(first["id"]) == before
    assert await api.claims() == [claim_before]
    # The current holder is unaffected.
    r = await api.heartbeat(first["id"], {"claimId": second["claimId"]})
    assert r.status_code == 200


async def test_terminal_status_removes_the_claim_and_repeating_it_succeeds(api: Api) -> None:
    _agent, claimed = await _claimed(api, lease=30)
    body = {"status": "successful", "claimId": claimed["claimId"], "message": "ok"}
    assert (await api.status(claimed["id"], body)).status_code == 202
    assert await api.claims() == []
    assert [a["outcome"] for a in await api.attempts(claimed["id"])] == ["completed"]
    done = await api.job(claimed["id"])

    # A retried `complete` with the same claimId is an idempotent success.
    r = await api.status(claimed["id"], body)
    assert r.status_code == 202
    assert await api.job(claimed["id"]) == done
    # A different terminal status is a conflict.
    r = await api.status(claimed["id"], {"status": "failure", "claimId": claimed["claimId"]})
    assert r.status_code == 409
    assert r.json()["code"] in ("CLAIM_LOST", "JOB_TERMINAL")
    # The heartbeat of a finished job is a lost claim, with the job's status.
    r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"]})
    assert r.status_code == 409
    assert r.json()["code"] == "CLAIM_LOST"
    assert r.json()["details"]["jobStatus"] == "successful"
    # Without a claimId any transition is accepted, as ctrlplane does (a V1 agent sends none).
    r = await api.status(claimed["id"], {"status": "failure"})
    assert r.status_code == 202
    assert (await api.job(claimed["id"]))["status"] == "failure"


async def test_cancel_makes_the_agents_heartbeat_409_cancelled(api: Api) -> None:
    _agent, claimed = await _claimed(api, lease=30)
    r = await api.status(claimed["id"], {"status": "cancelled", "message": "operator"})
    assert r.status_code == 202
    # The claim is revoked (its agent has not stopped its command yet), no longer active.
    assert [c["state"] for c in await api.claims()] == ["revoked"]
    assert await api.claims(state="active") == []
    r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"]})
    assert r.status_code == 409
    assert r.json()["code"] == "CLAIM_LOST"
    assert r.json()["details"]["jobStatus"] == "cancelled"
    assert [a["outcome"] for a in await api.attempts(claimed["id"])] == ["cancelled"]


async def test_release_requeues_at_once(api: Api) -> None:
    agent, claimed = await _claimed(api, lease=30)
    r = await api.status(claimed["id"], {"status": "queued", "claimId": claimed["claimId"]})
    assert r.status_code == 202
    assert (await api.job(claimed["id"]))["status"] == "queued"
    assert await api.claims() == []
    r = await api.claim_next(agent, {"leaseSeconds": 30})
    assert r.status_code == 200
    assert r.json()["id"] == claimed["id"]
    assert r.json()["attempt"] == 2
    outcomes = [a["outcome"] for a in await api.attempts(claimed["id"])]
    assert outcomes == ["released", None]


async def test_operator_requeue_without_claim_id(api: Api) -> None:
    _agent, claimed = await _claimed(api, lease=30)
    assert (await api.status(claimed["id"], {"status": "queued"})).status_code == 202
    assert (await api.job(claimed["id"]))["status"] == "queued"
    r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"]})
    assert r.status_code == 409
    assert r.json()["details"]["jobStatus"] == "queued"


async def test_unleased_claim_is_never_reaped(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    r = await api.claim(agent, job["id"])  # V1: unleased
    assert r.status_code == 200
    assert r.json()["claimId"] is None
    _leased_agent, leased = await _claimed(api, lease=30)
    await api.expire(leased["id"])
    assert (await api.reap()).requeued == 1  # the leased one only
    assert (await api.job(job["id"]))["status"] == "inProgress"
    (unleased,) = await api.claims(state="unleased")
    assert unleased["jobId"] == job["id"]
    assert unleased["claimId"] is None
    assert unleased["state"] == "unleased"
    # Its agent may still finish it without a claimId.
    assert (await api.status(job["id"], {"status": "successful"})).status_code == 202


async def test_max_reclaims_turns_the_nth_expiry_into_failure(database_url: str) -> None:
    async for api in make_api(database_url, max_reclaims=2):
        agent = await api.agent()
        job = await api.enqueue(agent)
        for attempt in (1, 2):
            r = await api.claim_next(agent, {"leaseSeconds": 30})
            assert r.status_code == 200
            assert r.json()["attempt"] == attempt
            await api.expire(job["id"])
            result = await api.reap()
            assert result.total == 1
        assert result.failed == 1
        stored = await api.job(job["id"])
        assert stored["status"] == "failure"
        assert stored["message"] == "lease expired 2 times"
        outcomes = [a["outcome"] for a in await api.attempts(job["id"])]
        assert outcomes == ["expired", "expired"]
        assert (await api.claim_next(agent, {"leaseSeconds": 30})).status_code == 204


async def test_four_concurrent_reapers_requeue_each_job_exactly_once(api: Api) -> None:
    agent = await api.agent()
    jobs = [await api.enqueue(agent) for _ in range(40)]
    for _ in jobs:
        assert (await api.claim_next(agent, {"leaseSeconds": 30})).status_code == 200
    await api.expire(*(job["id"] for job in jobs))
    # Four reapers, each with its own connection (as four replicas would have).
    stores = [open_store(api.database_url) for _ in range(4)]
    for store in stores:
        await store.open()
    try:
        reapers = [Reaper(store, interval=1, batch_size=7, max_reclaims=0) for store in stores]
        results = await asyncio.gather(*(r.run_once() for r in reapers))
    finally:
        for store in stores:
            await store.close()
    assert all(result is not None for result in results)
    assert sum(result.requeued for result in results if result) == len(jobs)
    for job in jobs:
        attempts = await api.attempts(job["id"])
        assert [a["outcome"] for a in attempts] == ["expired"]
        assert (await api.job(job["id"]))["status"] == "queued"


async def test_heartbeat_after_expiry_before_the_sweep_revives_the_claim(api: Api) -> None:
    _agent, claimed = await _claimed(api, lease=30)
    await api.expire(claimed["id"])
    r = await api.heartbeat(claimed["id"], {"claimId": claimed["claimId"], "leaseSeconds": 30})
    assert r.status_code == 200
    assert (await api.reap()).total == 0
    (claim,) = await api.claims()
    assert claim["state"] == "active"


async def test_require_claim_id_for_agent_keys(database_url: str) -> None:
    async for api in make_api(database_url, require_claim_id=True):
        agent, claimed = await _claimed(api, lease=30)
        agent_key = await api.new_key(agent)
        r = await api.status(claimed["id"], {"status": "successful"}, key=agent_key)
        assert r.status_code == 400
        assert r.json()["code"] == "VALIDATION_ERROR"
        assert (await api.job(claimed["id"]))["status"] == "inProgress"
        # A workspace key (an operator) may still act without one.
        r = await api.status(claimed["id"], {"status": "cancelled"})
        assert r.status_code == 202
