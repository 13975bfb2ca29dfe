"""Batching for busy agents: claim-next's ``limit``, and a status update that
claims the agent's next jobs (``claimNext``), on both databases and both HTTP paths."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fixtures.server_app import Api
from tests.fixtures.waiting import await_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def api(api_each_path: Api) -> Api:
    """Every test of this module runs on both HTTP paths."""
    return api_each_path


async def _queued(api: Api, agent: str, n: int) -> list[str]:
    return [(await api.enqueue(agent))["id"] for _ in range(n)]


async def test_claim_next_with_limit_hands_out_the_oldest_jobs_each_with_a_claim(
    api: Api,
) -> None:
    agent = await api.agent()
    other = await api.agent("other")
    await api.enqueue(other)
    jobs = await _queued(api, agent, 5)
    r = await api.claim_next(agent, {"leaseSeconds": 30, "limit": 3})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert list(r.json()) == ["items"]
    assert [j["id"] for j in items] == jobs[:3]
    assert len({j["claimId"] for j in items}) == 3
    assert all(j["status"] == "inProgress" and j["leaseSeconds"] == 30 for j in items)
    assert all(j["attempt"] == 1 for j in items)
    rest = (await api.claim_next(agent, {"leaseSeconds": 30, "limit": 3})).json()["items"]
    assert [j["id"] for j in rest] == jobs[3:]
    assert (await api.claim_next(agent, {"leaseSeconds": 30, "limit": 3})).status_code == 204
    # Without a limit the answer is one claimed job, as before.
    fresh = await _queued(api, agent, 2)
    single = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    assert single["id"] == fresh[0] and "items" not in single
    # Fencing stays per job: one job's claim id does not complete another of the batch.
    stale = await api.status(
        items[1]["id"], {"status": "successful", "claimId": items[0]["claimId"]}
    )
    assert stale.status_code == 409
    ok = await api.status(items[1]["id"], {"status": "successful", "claimId": items[1]["claimId"]})
    assert ok.status_code == 202
    beat = await api.heartbeat(items[2]["id"], {"claimId": items[2]["claimId"]})
    assert beat.status_code == 200


@pytest.mark.parametrize("limit", [0, 101, -1, "3", True, 1.5, None])
async def test_a_bad_limit_is_a_validation_error(api: Api, limit: Any) -> None:
    agent = await api.agent()
    await api.enqueue(agent)
    r = await api.claim_next(agent, {"leaseSeconds": 30, "limit": limit})
    if limit is None:  # null = no limit: one job
        assert r.status_code == 200 and "items" not in r.json()
        return
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"
    assert await api.claims() == []  # the refused request claimed nothing


async def test_a_long_poll_with_a_limit_answers_what_was_queued(api: Api) -> None:
    agent = await api.agent()
    waiting = asyncio.ensure_future(
        api.claim_next(agent, {"leaseSeconds": 30, "waitSeconds": 60, "limit": 4})
    )
    await await_until(lambda: api.app.framework.state.service.metrics.long_polls._value.get() >= 1,
                      what="the long-poll to wait")  # fmt: skip
    job = await api.enqueue(agent)
    r = await asyncio.wait_for(waiting, 30)
    assert r.status_code == 200
    assert [j["id"] for j in r.json()["items"]] == [job["id"]]


async def test_a_status_update_with_claim_next_claims_the_agents_next_jobs(
    api: Api,
) -> None:
    agent = await api.agent()
    other = await api.agent("other")
    theirs = await api.enqueue(other)
    jobs = await _queued(api, agent, 4)
    current = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    assert current["id"] == jobs[0]
    body = {
        "status": "successful",
        "claimId": current["claimId"],
        "claimNext": {"leaseSeconds": 20, "limit": 2},
    }
    r = await api.status(current["id"], body)
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer["id"] == current["id"] and answer["message"]
    claimed = answer["claimed"]
    assert [j["id"] for j in claimed] == jobs[1:3]
    assert all(j["status"] == "inProgress" and j["leaseSeconds"] == 20 for j in claimed)
    assert all(j["claimId"] and j["attempt"] == 1 for j in claimed)
    assert (await api.job(current["id"]))["status"] == "successful"
    assert [a["outcome"] for a in await api.attempts(current["id"])] == ["completed"]
    held = {c["jobId"]: c["claimId"] for c in await api.claims()}
    assert held == {j["id"]: j["claimId"] for j in claimed}
    assert (await api.job(theirs["id"]))["status"] == "queued"  # another agent's job stays
    # Without claimNext the answer is {id, message}, no claimed key.
    plain = await api.status(
        claimed[0]["id"], {"status": "failure", "claimId": claimed[0]["claimId"]}
    )
    assert plain.status_code == 202 and set(plain.json()) == {"id", "message"}
    # Nothing queued but one job: it comes; then nothing: [].
    last = await api.status(
        claimed[1]["id"],
        {"status": "successful", "claimId": claimed[1]["claimId"], "claimNext": {"limit": 5}},
    )
    assert [j["id"] for j in last.json()["claimed"]] == [jobs[3]]
    final = last.json()["claimed"][0]
    empty = await api.status(
        final["id"], {"status": "successful", "claimId": final["claimId"], "claimNext": {}}
    )
    assert empty.status_code == 202 and empty.json()["claimed"] == []


async def test_a_refused_update_claims_nothing(api: Api) -> None:
    agent = await api.agent()
    jobs = await _queued(api, agent, 2)
    current = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    assert (
        await api.status(current["id"], {"status": "queued", "claimId": current["claimId"]})
    ).status_code == 202
    # The claim was given back: its holder can no longer end it, and claims nothing.
    r = await api.status(
        current["id"],
        {"status": "successful", "claimId": current["claimId"], "claimNext": {"limit": 2}},
    )
    assert r.status_code == 409
    assert await api.claims() == []
    assert [(await api.job(j))["status"] for j in jobs] == ["queued", "queued"]


@pytest.mark.parametrize(
    "body",
    [
        {"status": "successful", "claimNext": {}},  # no claimId: not the holder ending it
        {"status": "inProgress", "claimId": "CLAIM", "claimNext": {}},
        {"status": "successful", "claimId": "CLAIM", "claimNext": {"limit": 0}},
        {"status": "successful", "claimId": "CLAIM", "claimNext": {"limit": 101}},
        {"status": "successful", "claimId": "CLAIM", "claimNext": {"leaseSeconds": "x"}},
        {"status": "successful", "claimId": "CLAIM", "claimNext": 1},
    ],
)
async def test_claim_next_needs_the_holder_ending_its_attempt(
    api: Api, body: dict[str, Any]
) -> None:
    agent = await api.agent()
    await _queued(api, agent, 2)
    current = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    if body.get("claimId") == "CLAIM":
        body = {**body, "claimId": current["claimId"]}
    r = await api.status(current["id"], body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"
    # Nothing changed: the job is still held, the other one still queued.
    assert [c["jobId"] for c in await api.claims()] == [current["id"]]


async def test_an_agent_key_claims_its_own_agents_next_jobs(api: Api) -> None:
    agent = await api.agent()
    other = await api.agent("other")
    key = await api.new_key(agent)
    theirs = await api.enqueue(other)
    jobs = await _queued(api, agent, 2)
    r = await api.claim_next(agent, {"leaseSeconds": 30, "limit": 1}, key=key)
    current = r.json()["items"][0]
    r = await api.status(
        current["id"],
        {"status": "successful", "claimId": current["claimId"], "claimNext": {"limit": 5}},
        key=key,
    )
    assert [j["id"] for j in r.json()["claimed"]] == [jobs[1]]
    assert (await api.job(theirs["id"]))["status"] == "queued"
    # Another agent's batch through this key: 404, as every call outside its scope.
    assert (await api.claim_next(other, {"limit": 2}, key=key)).status_code == 404
