"""``GET …/job-claims/urgent``: the most urgent claims first and the count of each mark."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio


async def _urgent(api: Api, key: str | None = None, **params: Any) -> dict[str, Any]:
    r = await api.call("GET", "job-claims/urgent", params=params, key=key)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _world(api: Api) -> tuple[str, dict[str, str]]:
    """An agent with one claim of each kind (and a queued job, which is no claim)."""
    agent = await api.agent()
    jobs = {name: (await api.enqueue(agent))["id"] for name in ("far", "near", "v1", "lapsed")}
    await api.enqueue(agent)
    for name, body in (
        ("far", {"leaseSeconds": 600}),
        ("near", {"leaseSeconds": 60}),
        ("v1", None),
        ("lapsed", {"leaseSeconds": 60}),
    ):
        r = await api.claim(agent, jobs[name], body)
        assert r.status_code == 200, r.text
    await api.expire(jobs["lapsed"])
    return agent, jobs


async def test_most_urgent_first_with_counts(api: Api) -> None:
    agent, jobs = await _world(api)
    body = await _urgent(api, limit=10)
    order = [item["jobId"] for item in body["items"]]
    assert order == [jobs["lapsed"], jobs["v1"], jobs["near"], jobs["far"]]
    assert [item["state"] for item in body["items"]] == ["expired", "unleased", "active", "active"]
    assert body["counts"] == {"expired": 1, "unleased": 1, "active": 2}
    assert (body["total"], body["limit"]) == (4, 10)

    # Silent for longer than 0 s: every active claim is stale, ranked with the unleased one.
    stale = await _urgent(api, staleAfter=0, limit=10)
    assert stale["counts"] == {"expired": 1, "unleased": 1, "stale": 2}
    stale_order = [item["jobId"] for item in stale["items"]]
    assert stale_order == [jobs["lapsed"], jobs["near"], jobs["far"], jobs["v1"]]
    assert (await _urgent(api, staleAfter=3600))["counts"] == body["counts"]

    # Only what the frame shows, with the counts of all.
    one = await _urgent(api, limit=1)
    assert [item["jobId"] for item in one["items"]] == [jobs["lapsed"]]
    assert (one["total"], one["counts"]) == (4, body["counts"])
    active = await _urgent(api, state="active", jobAgentId=agent)
    assert active["counts"] == {"active": 2}
    assert [item["jobId"] for item in active["items"]] == [jobs["near"], jobs["far"]]


async def test_scoped_to_the_key_and_checked(api: Api) -> None:
    agent, _ = await _world(api)
    other = await api.agent("other")
    own_key = await api.new_key(other)
    assert (await _urgent(api, key=own_key))["total"] == 0
    r = await api.call("GET", "job-claims/urgent", params={"jobAgentId": agent}, key=own_key)
    assert r.status_code == 404
    for bad in ({"staleAfter": -1}, {"limit": 0}, {"state": "lost"}, {"staleAfter": "nan"}):
        r = await api.call("GET", "job-claims/urgent", params=bad)
        assert r.status_code == 400, (bad, r.text)
