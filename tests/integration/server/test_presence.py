"""Agent presence on both databases: requests made for an agent record when it was last seen,
at most one write per agent per presence interval; `GET job-agents` answers each agent's state
(busy, idle, offline) and filters by it; /metrics counts agents by state."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any
from uuid import UUID

import pytest

from jobagentctl.server.presence import Presence
from tests.fixtures.databases import sql
from tests.fixtures.server_app import Api, open_api

pytestmark = pytest.mark.anyio


def _count_writes(api: Api, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every presence write the store receives, by agent."""
    writes: Counter[str] = Counter()
    touch = api.store.entities.touch_agent

    async def counted(workspace_id: UUID, agent_id: UUID) -> None:
        writes[str(agent_id)] += 1
        await touch(workspace_id, agent_id)

    monkeypatch.setattr(api.store.entities, "touch_agent", counted)
    return writes


async def _requests_for(api: Api, agent: str, other: str) -> None:
    """Each kind of request made for ``agent`` (and one for ``other``)."""
    job = await api.enqueue(agent)
    claimed = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    for _ in range(3):
        assert (await api.heartbeat(job["id"], {"claimId": claimed["claimId"]})).status_code == 200
    assert (await api.call("GET", f"job-agents/{agent}/jobs")).status_code == 200
    body = {"status": "successful", "claimId": claimed["claimId"]}
    assert (await api.status(job["id"], body)).status_code == 202
    second = await api.enqueue(agent)
    assert (await api.claim(agent, second["id"], {"leaseSeconds": 30})).status_code == 200
    assert (await api.claim_next(agent, {"waitSeconds": 0})).status_code == 204
    assert (await api.claim_next(other, {"waitSeconds": 0})).status_code == 204


async def test_at_most_one_presence_write_per_agent_per_interval(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_api(database_url, presence_interval=3600) as api:
        agent, other, silent = await api.agent("a"), await api.agent("b"), await api.agent("c")
        writes = _count_writes(api, monkeypatch)
        await _requests_for(api, agent, other)
        assert writes == {agent: 1, other: 1}  # 8 requests for `agent`, one write
        stored = sql(database_url, "SELECT job_agent_id FROM job_agent_presence")
        assert {str(row[0]) for row in stored} == {agent, other}
        assert silent not in writes
    # The control: with no interval every request writes (the counter sees them all).
    async with open_api(database_url, presence_interval=0) as api:
        agent, other = await api.agent("a"), await api.agent("b")
        writes = _count_writes(api, monkeypatch)
        await _requests_for(api, agent, other)
        assert writes == {agent: 8, other: 1}


class _Store:
    def __init__(self) -> None:
        self.touched: list[UUID] = []
        self.entities = self  # Presence calls store.entities.touch_agent

    async def touch_agent(self, workspace_id: UUID, agent_id: UUID) -> None:
        self.touched.append(agent_id)


async def test_the_throttle_is_per_agent_and_per_interval() -> None:
    now = [100.0]
    store = _Store()
    presence = Presence(store, 15.0, clock=lambda: now[0])  # type: ignore[arg-type]
    a, b, ws = UUID(int=1), UUID(int=2), UUID(int=3)
    for t in (100.0, 105.0, 114.9):
        now[0] = t
        await presence.seen(ws, a)
    await presence.seen(ws, b)
    await presence.seen(ws, None)
    assert store.touched == [a, b]
    now[0] = 115.0  # one interval after a's write
    await presence.seen(ws, a)
    await presence.seen(ws, b)
    assert store.touched == [a, b, a]
    assert presence.writes == 3
    # Another workspace naming `a` has a slot of its own: it cannot use up a's.
    await presence.seen(UUID(int=4), a)
    assert store.touched == [a, b, a, a]


def _states(page: dict[str, Any]) -> dict[str, tuple[str, bool, int]]:
    return {
        a["name"]: (a["state"], a["lastSeenAt"] is not None, a["heldClaims"]) for a in page["items"]
    }


async def test_agents_list_shows_and_filters_states(api: Api) -> None:
    busy, idle, offline = await api.agent("busy"), await api.agent("idle"), await api.agent("off")
    await api.enqueue(busy)
    assert (await api.claim_next(busy, {"leaseSeconds": 30})).status_code == 200
    assert (await api.claim_next(idle, {"waitSeconds": 0})).status_code == 204
    page = (await api.call("GET", "job-agents")).json()
    assert _states(page) == {
        "busy": ("busy", True, 1),
        "idle": ("idle", True, 0),
        "off": ("offline", False, 0),
    }
    only_idle = (await api.call("GET", "job-agents", params={"state": "idle"})).json()
    assert [a["id"] for a in only_idle["items"]] == [idle] and only_idle["total"] == 1
    assert (await api.call("GET", "job-agents", params={"state": "asleep"})).status_code == 400
    got = (await api.call("GET", f"job-agents/{offline}")).json()
    assert (got["state"], got["lastSeenAt"]) == ("offline", None)

    # Seen longer ago than the window (90 s by default): offline.
    ago = "- 3600" if api.database_url.startswith("sqlite:") else "- interval '1 hour'"
    sql(api.database_url, f"UPDATE job_agent_presence SET last_seen_at = last_seen_at {ago}")
    page = (await api.call("GET", "job-agents")).json()
    assert _states(page)["idle"] == ("offline", True, 0)
    # Its lease still holds, but an agent not seen within the window is dead to the operator:
    # offline, with what it holds beside the state.
    assert _states(page)["busy"] == ("offline", True, 1)
    got = (await api.call("GET", f"job-agents/{busy}")).json()
    assert (got["state"], got["heldClaims"]) == ("offline", 1)
    only_busy = (await api.call("GET", "job-agents", params={"state": "busy"})).json()
    assert only_busy["items"] == []

    metrics = (await api.client.get("/metrics")).text
    assert 'jobagentctl_agents{state="busy"} 0.0' in metrics
    assert 'jobagentctl_agents{state="idle"} 0.0' in metrics
    assert 'jobagentctl_agents{state="offline"} 3.0' in metrics

    # Seen again (its heartbeat; no throttle now, its last write was moments ago): busy again.
    api.app.framework.state.service.presence.interval = 0
    claimed = (await api.claims())[0]
    beat = await api.heartbeat(claimed["jobId"], {"claimId": claimed["claimId"]})
    assert beat.status_code == 200, beat.text
    page = (await api.call("GET", "job-agents")).json()
    assert _states(page)["busy"] == ("busy", True, 1)


def _seen_at(database_url: str, agent: str) -> Any:
    placeholder = "?" if database_url.startswith("sqlite:") else "%s"
    rows = sql(
        database_url,
        f"SELECT last_seen_at FROM job_agent_presence WHERE job_agent_id = {placeholder}",
        [agent if database_url.startswith("sqlite:") else UUID(agent)],
    )
    return rows[0][0] if rows else None


async def _foreign_requests(api: Api, agent: str, job: str, claim: str, key: str) -> None:
    """Every request that records presence, made with ``key`` naming ``agent`` or its job
    (claimed as ``claim``): each must be refused with 404."""
    refused = [
        await api.call("GET", f"job-agents/{agent}/jobs", key=key),
        await api.call("GET", f"job-agents/{agent}/jobs", key=key, params={"status": "queued"}),
        await api.claim_next(agent, {"waitSeconds": 0}, key=key),
        await api.claim_next(agent, {"leaseSeconds": 30, "waitSeconds": 0}, key=key),
        await api.claim(agent, job, {"leaseSeconds": 30}, key=key),
        await api.claim(agent, job, key=key),
        await api.heartbeat(job, {"claimId": claim}, key=key),
        await api.status(job, {"status": "successful", "claimId": claim}, key=key),
    ]
    assert [r.status_code for r in refused] == [404] * len(refused), [r.text for r in refused]


async def test_a_request_refused_for_scope_records_no_presence(database_url: str) -> None:
    """Another workspace's key (on its own paths) and another agent's key name an agent: 404,
    and the agent stays as it was seen (offline), every endpoint that records presence."""
    async with open_api(database_url, presence_interval=0) as api:
        other_ws = str(await api.store.entities.create_workspace("other"))
        other_key = await api.new_key(ws=other_ws)
        agent = await api.agent("target")
        neighbour = await api.agent("neighbour")
        neighbour_key = await api.new_key(neighbour)
        jobs = [(await api.enqueue(agent))["id"] for _ in range(2)]
        claimed = (await api.claim(agent, jobs[0], {"leaseSeconds": 30})).json()
        # Seen an hour ago: offline, as a dead agent is.
        ago = "- 3600" if database_url.startswith("sqlite:") else "- interval '1 hour'"
        sql(database_url, f"UPDATE job_agent_presence SET last_seen_at = last_seen_at {ago}")
        before = _seen_at(database_url, agent)
        assert before is not None

        # Workspace B's key on B's own paths naming A's agent, then an agent key of A's.
        other = dataclasses.replace(api, workspace_id=other_ws)
        await _foreign_requests(other, agent, jobs[1], claimed["claimId"], other_key)
        await _foreign_requests(api, agent, jobs[1], claimed["claimId"], neighbour_key)
        assert _seen_at(database_url, agent) == before
        got = (await api.call("GET", f"job-agents/{agent}")).json()
        assert got["state"] != "idle"

        # The control: the agent's own request is recorded.
        own_key = await api.new_key(agent)
        assert (await api.call("GET", f"job-agents/{agent}/jobs", key=own_key)).status_code == 200
        assert _seen_at(database_url, agent) != before
