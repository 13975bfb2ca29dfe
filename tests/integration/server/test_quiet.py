"""A claim's last output time: heartbeats carry ``lastOutputAt``, claims show it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_heartbeat_records_last_output_on_the_claim(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    claimed = (await api.claim(agent, job["id"], {"leaseSeconds": 30})).json()
    beat = {"claimId": claimed["claimId"]}
    (claim,) = await api.claims()
    assert claim.get("lastOutputAt") is None  # nothing printed yet: quiet since claimedAt

    printed = datetime.now(UTC) - timedelta(seconds=40)
    r = await api.heartbeat(job["id"], {**beat, "lastOutputAt": printed.isoformat()})
    assert r.status_code == 200, r.text
    (claim,) = await api.claims()
    assert abs((_at(claim["lastOutputAt"]) - printed).total_seconds()) < 0.01

    # A heartbeat without it (an older agent, or no output since) keeps what was known.
    assert (await api.heartbeat(job["id"], beat)).status_code == 200
    (claim,) = await api.claims()
    assert abs((_at(claim["lastOutputAt"]) - printed).total_seconds()) < 0.01

    # An agent clock ahead of the database's cannot make a claim look busier than now.
    ahead = datetime.now(UTC) + timedelta(hours=1)
    assert (await api.heartbeat(job["id"], {**beat, "lastOutputAt": ahead.isoformat()})).is_success
    (claim,) = await api.claims()
    assert _at(claim["lastOutputAt"]) < datetime.now(UTC) + timedelta(seconds=5)

    # A new claim of the job starts quiet again.
    released = await api.status(job["id"], {"status": "queued", "claimId": claimed["claimId"]})
    assert released.status_code == 202, released.text
    assert (await api.claim(agent, job["id"], {"leaseSeconds": 30})).status_code == 200
    (claim,) = await api.claims()
    assert claim.get("lastOutputAt") is None


async def test_a_stale_heartbeat_writes_no_output_time(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    assert (await api.claim(agent, job["id"], {"leaseSeconds": 30})).status_code == 200
    stale = {"claimId": "00000000-0000-4000-8000-000000000000"}
    now = datetime.now(UTC).isoformat()
    r = await api.heartbeat(job["id"], {**stale, "lastOutputAt": now})
    assert r.status_code == 409
    (claim,) = await api.claims()
    assert claim.get("lastOutputAt") is None


async def test_the_urgent_claims_mark_quiet_ones_after_quiet_after(api: Api) -> None:
    """``job-claims/urgent?quietAfter=S`` marks an active claim whose command printed nothing
    for S seconds as quiet (ranked before active ones, counted apart), judged by the database
    clock; without quietAfter the same claim is active."""
    agent = await api.agent()
    quiet, busy = (await api.enqueue(agent))["id"], (await api.enqueue(agent))["id"]
    for job in (quiet, busy):
        claimed = (await api.claim(agent, job, {"leaseSeconds": 300})).json()
        printed = datetime.now(UTC) - timedelta(seconds=600 if job == quiet else 1)
        body = {"claimId": claimed["claimId"], "lastOutputAt": printed.isoformat()}
        assert (await api.heartbeat(job, body)).status_code == 200
    marked = (await api.call("GET", "job-claims/urgent", params={"quietAfter": 300})).json()
    assert marked["counts"] == {"quiet": 1, "active": 1}
    assert [c["jobId"] for c in marked["items"]] == [quiet, busy]
    plain = (await api.call("GET", "job-claims/urgent")).json()
    assert plain["counts"] == {"active": 2}
