"""The cancellation long-poll: POST /v1/workspaces/{ws}/jobs/{jobId}/wait
answers as soon as the claim is no longer held, or when the wait runs out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio


async def _claimed(api: Api) -> tuple[str, dict[str, Any]]:
    agent = await api.agent()
    await api.enqueue(agent)
    r = await api.claim_next(agent, {"leaseSeconds": 30})
    assert r.status_code == 200, r.text
    return agent, r.json()


async def _wait(api: Api, job: dict[str, Any], seconds: float, **body: Any) -> Any:
    payload = {"claimId": job["claimId"], "waitSeconds": seconds, **body}
    return await api.call("POST", f"jobs/{job['id']}/wait", payload)


async def test_wait_runs_out_while_the_claim_is_held(api: Api) -> None:
    _, job = await _claimed(api)
    r = await _wait(api, job, 0)
    assert r.status_code == 200, r.text
    assert r.json() == {"jobId": job["id"], "status": "inProgress", "claimHeld": True}


@pytest.mark.parametrize("how", ["cancelled", "released", "completed", "reaped"])
async def test_wait_answers_when_the_claim_ends(api: Api, how: str) -> None:
    _, job = await _claimed(api)
    waiting = asyncio.ensure_future(_wait(api, job, 30))
    await asyncio.sleep(0)  # the wait may start before or after the change: same answer
    if how == "cancelled":
        assert (await api.status(job["id"], {"status": "cancelled"})).status_code == 202
    elif how == "released":
        body = {"status": "queued", "claimId": job["claimId"]}
        assert (await api.status(job["id"], body)).status_code == 202
    elif how == "completed":
        body = {"status": "successful", "claimId": job["claimId"]}
        assert (await api.status(job["id"], body)).status_code == 202
    else:
        await api.expire(job["id"])
        assert (await api.reap()).requeued == 1
    r = await asyncio.wait_for(waiting, 30)
    assert r.status_code == 200, r.text
    expected = {"cancelled": "cancelled", "released": "queued", "completed": "successful"}
    assert r.json()["claimHeld"] is False
    assert r.json()["status"] == expected.get(how, "queued")


async def test_wait_refuses_what_it_must(api: Api) -> None:
    _, job = await _claimed(api)
    r = await api.call("POST", f"jobs/{job['id']}/wait", {"waitSeconds": 1})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    unknown = "00000000-0000-4000-8000-000000000000"
    r = await api.call("POST", f"jobs/{unknown}/wait", {"claimId": job["claimId"]})
    assert r.status_code == 404
    r = await api.call("POST", f"jobs/{job['id']}/wait", {"claimId": job["claimId"]}, key="")
    assert r.status_code == 401
    # Another claim id than the job's: not held.
    r = await api.call("POST", f"jobs/{job['id']}/wait", {"claimId": unknown})
    assert r.status_code == 200 and r.json()["claimHeld"] is False
