"""The scope matrix: every principal × every V1/V2 endpoint → the expected status.

Principals: the workspace key, an agent key on its own agent, an agent key of another agent, a
key of another workspace, a revoked key, no key, and six malformed keys. Every cell runs on a
fresh queued job and a fresh claimed job of agent A; a refused call (401/404) must answer the
error shape and leave every job, claim and agent of the workspace exactly as it was, and a list
narrowed to an agent key must not show another agent's jobs.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.fixtures.server_app import Api, requests_naming

pytestmark = pytest.mark.anyio

WS, OWN, OTHER, OTHER_WS, REVOKED, NO_KEY = (
    "workspace key",
    "agent key, own agent",
    "agent key, other agent",
    "other workspace's key",
    "revoked key",
    "no key",
)
MALFORMED = {
    "garbage": "not-a-key",
    "no secret": "jac_abcdefghijkl.",
    "no prefix": ".secret",
    "dot only": ".",
    "too long": "jac_abcdefghijkl." + "x" * 300,
    "SQL in key": "jac_x' OR '1'='1.'; DROP TABLE api_key; --",
}
# Filled in per test: the known prefix with a wrong secret is one more malformed key.
WRONG_SECRET = "known prefix, wrong secret"


@dataclass
class World:
    """The workspace's fixed parts: agent A (the target), agent B, and every principal's key."""

    api: Api
    agent_a: str
    agent_b: str
    keys: dict[str, str | None]


@dataclass
class Cell:
    """Fresh per cell: a queued job of A and a claimed (leased) job of A."""

    queued: str
    claimed: str
    claim_id: str


Call = Callable[[World, Cell, str | None], Awaitable[httpx.Response]]


def _request(method: str, rest: Callable[[World, Cell], str], body: Any = None) -> Call:
    async def call(world: World, cell: Cell, key: str | None) -> httpx.Response:
        headers = {} if key is None else {"X-API-Key": key}
        payload = body(cell) if callable(body) else body
        kwargs: dict[str, Any] = {"headers": headers}
        if payload is not None:
            kwargs["json"] = payload
        return await world.api.client.request(method, world.api.path(rest(world, cell)), **kwargs)

    return call


# Endpoint → (call, expected status per principal that may use it). Any principal not listed
# gets 404 (a valid key outside its scope) or 401 (no valid key). DELETE comes last: it
# removes agent A.
ENDPOINTS: dict[str, tuple[Call, dict[str, int]]] = {
    "PUT job-agents/{A}": (
        _request("PUT", lambda w, c: f"job-agents/{w.agent_a}", {"name": "a", "type": "shell"}),
        {WS: 202},
    ),
    "GET job-agents": (_request("GET", lambda w, c: "job-agents"), {WS: 200}),
    "GET job-agents/{A}": (
        _request("GET", lambda w, c: f"job-agents/{w.agent_a}"),
        {WS: 200, OWN: 200},
    ),
    "GET job-agents/{A}/jobs": (
        _request("GET", lambda w, c: f"job-agents/{w.agent_a}/jobs?status=queued"),
        {WS: 200, OWN: 200},
    ),
    "POST job-agents/{A}/jobs/{queued}/claim": (
        _request(
            "POST",
            lambda w, c: f"job-agents/{w.agent_a}/jobs/{c.queued}/claim",
            {"leaseSeconds": 300},
        ),
        {WS: 200, OWN: 200},
    ),
    "GET jobs": (_request("GET", lambda w, c: "jobs?limit=1000"), {WS: 200, OWN: 200, OTHER: 200}),
    "GET jobs/{claimed}": (_request("GET", lambda w, c: f"jobs/{c.claimed}"), {WS: 200, OWN: 200}),
    "GET jobs/{claimed}/attempts": (
        _request("GET", lambda w, c: f"jobs/{c.claimed}/attempts"),
        {WS: 200, OWN: 200},
    ),
    "POST jobs/{claimed}/heartbeat": (
        _request(
            "POST", lambda w, c: f"jobs/{c.claimed}/heartbeat", lambda c: {"claimId": c.claim_id}
        ),
        {WS: 200, OWN: 200},
    ),
    "PUT jobs/{claimed}/status": (
        _request(
            "PUT",
            lambda w, c: f"jobs/{c.claimed}/status",
            lambda c: {"status": "successful", "claimId": c.claim_id},
        ),
        {WS: 202, OWN: 202},
    ),
    "POST job-agents/{A}/claim": (
        _request("POST", lambda w, c: f"job-agents/{w.agent_a}/claim", {"leaseSeconds": 300}),
        {WS: 200, OWN: 200},
    ),
    "GET job-claims": (
        _request("GET", lambda w, c: "job-claims?limit=1000"),
        {WS: 200, OWN: 200, OTHER: 200},
    ),
    "GET job-claims/urgent": (
        _request("GET", lambda w, c: "job-claims/urgent?limit=1000&staleAfter=0"),
        {WS: 200, OWN: 200, OTHER: 200},
    ),
    "POST job-agents/{A}/jobs": (
        _request("POST", lambda w, c: f"job-agents/{w.agent_a}/jobs", {"metadata": {"k": "v"}}),
        {WS: 201},
    ),
    "DELETE job-agents/{A}": (
        _request("DELETE", lambda w, c: f"job-agents/{w.agent_a}"),
        {WS: 202},
    ),
}
VALID_KEYS = (WS, OWN, OTHER, OTHER_WS)


async def _world(api: Api) -> World:
    agent_a, agent_b = await api.agent("a"), await api.agent("b")
    other_ws = await api.store.entities.create_workspace("other")
    revoked = await api.new_key()
    prefix = revoked.split(".", 1)[0]
    record = await api.store.entities.get_api_key(prefix)
    assert record is not None
    assert await api.store.entities.revoke_api_key(record.id)
    keys: dict[str, str | None] = {
        OWN: await api.new_key(agent_a),
        OTHER: await api.new_key(agent_b),
        OTHER_WS: await api.new_key(ws=str(other_ws)),
        REVOKED: revoked,
        NO_KEY: None,
        WRONG_SECRET: api.api_key.split(".", 1)[0] + ".wrong-secret",
        **{f"malformed: {name}": value for name, value in MALFORMED.items()},
        WS: api.api_key,  # last: its successful DELETE ends agent A
    }
    return World(api, agent_a, agent_b, keys)


async def _cell(world: World) -> Cell:
    api = world.api
    queued = await api.enqueue(world.agent_a)
    to_claim = await api.enqueue(world.agent_a)
    r = await api.claim(world.agent_a, to_claim["id"], {"leaseSeconds": 300})
    assert r.status_code == 200, r.text
    return Cell(queued["id"], to_claim["id"], r.json()["claimId"])


async def _fingerprint(world: World) -> Any:
    """Everything a refused call must not change, read with the workspace key."""
    api = world.api
    jobs = (await api.call("GET", "jobs", params={"limit": 1000})).json()["items"]
    claims = await api.claims(limit=1000)
    agents = (await api.call("GET", "job-agents", params={"limit": 1000})).json()["items"]
    return (
        sorted((j["id"], j["status"], j["updatedAt"], j.get("message")) for j in jobs),
        sorted((c["jobId"], c["claimId"], c["claimExpiresAt"]) for c in claims),
        sorted((a["id"], a["name"]) for a in agents),
    )


def _expected(principal: str, allowed: dict[str, int]) -> int:
    if principal in allowed:
        return allowed[principal]
    return 404 if principal in VALID_KEYS else 401


# Slow: every principal x every endpoint on fresh jobs (55-66 s a database with the machine busy).
@pytest.mark.slow
async def test_scope_matrix(api: Api) -> None:
    world = await _world(api)
    checked = 0
    for endpoint, (call, allowed) in ENDPOINTS.items():
        for principal, key in world.keys.items():
            cell = await _cell(world)
            before = await _fingerprint(world)
            r = await call(world, cell, key)
            expected = _expected(principal, allowed)
            assert r.status_code == expected, (endpoint, principal, r.status_code, r.text)
            checked += 1
            if expected >= 400:
                body = r.json()
                assert set(body) == {"message", "code", "details"}, body
                assert body["code"] == ("NOT_FOUND" if expected == 404 else "UNAUTHORIZED")
                assert await _fingerprint(world) == before, (endpoint, principal, "changed")
                secret = (key or "").partition(".")[2]
                if len(secret) >= 8:  # the key is never echoed back (short ones match anything)
                    assert secret not in r.text, (endpoint, principal)
            elif principal in (OWN, OTHER) and r.request.method == "GET":
                _assert_narrowed(world, cell, principal, r.json())
    print(f"scope matrix: {len(ENDPOINTS)} endpoints × {len(world.keys)} principals = {checked}")
    assert checked == len(ENDPOINTS) * len(world.keys)


def _assert_narrowed(world: World, cell: Cell, principal: str, body: Any) -> None:
    """An agent key's lists show its own agent only: B sees nothing of A, A nothing of B."""
    items = body.get("items", []) if isinstance(body, dict) else []
    agents = {i.get("jobAgentId") for i in items if "jobAgentId" in i}
    own = world.agent_a if principal == OWN else world.agent_b
    assert agents <= {own}, (principal, agents)
    if principal == OTHER:
        ids = {i.get("id") or i.get("jobId") for i in items}
        assert not ids & {cell.queued, cell.claimed}, "another agent's jobs leaked"


async def test_agent_key_cannot_claim_another_agents_job_through_its_own_agent(api: Api) -> None:
    """The job id belongs to B while the path names A, the key's agent: still 404."""
    world = await _world(api)
    theirs = await api.enqueue(world.agent_b)
    r = await api.claim(world.agent_a, theirs["id"], {"leaseSeconds": 300}, key=world.keys[OWN])
    assert r.status_code == 404
    assert (await api.job(theirs["id"]))["status"] == "queued"


async def test_ids_of_another_workspace_are_404_even_for_its_workspace_key(api: Api) -> None:
    """A workspace key naming its own workspace in the path cannot reach another workspace's
    agents and jobs by id (the row-level check, not only the path check)."""
    other_ws = await api.store.entities.create_workspace("other")
    other_key = await api.new_key(ws=str(other_ws))
    agent = await api.agent("mine")
    job = await api.enqueue(agent)
    ws = str(other_ws)
    for method, rest, body in [
        *requests_naming(agent, job["id"]),
        ("POST", f"job-agents/{agent}/jobs", {}),
        ("DELETE", f"job-agents/{agent}", None),
        ("PUT", f"job-agents/{agent}", {"name": "stolen", "type": "shell"}),
    ]:
        r = await api.call(method, rest, body, key=other_key, ws=ws)
        assert r.status_code == 404, (method, rest, r.status_code, r.text)
    assert (await api.job(job["id"]))["status"] == "queued"
    r = await api.call("GET", f"job-agents/{agent}")
    assert r.status_code == 200 and r.json()["name"] == "mine"
    listed = await api.call("GET", "jobs", key=other_key, ws=ws)
    assert listed.json()["items"] == []


async def test_unknown_workspace_and_ids_are_404_for_a_valid_key(api: Api) -> None:
    unknown = str(uuid.uuid4())
    for rest, ws in [("jobs", unknown), (f"jobs/{unknown}", None), (f"job-agents/{unknown}", None)]:
        r = await api.call("GET", rest, ws=ws)
        assert r.status_code == 404, (rest, r.text)


async def test_a_404_does_not_tell_existing_from_unknown(api: Api) -> None:
    """Outside a key's scope, an existing job or agent answers exactly like one that does not
    exist (same message, same details, ids aside): a key cannot probe for existence."""
    world = await _world(api)
    real = await _cell(world)
    ghost_agent, ghost = str(uuid.uuid4()), str(uuid.uuid4())
    fake = Cell(queued=ghost, claimed=str(uuid.uuid4()), claim_id=str(uuid.uuid4()))
    ghost_world = World(api, ghost_agent, world.agent_b, world.keys)
    compared = 0
    for principal in (OTHER, OTHER_WS):
        key = world.keys[principal]
        for endpoint, (call, allowed) in ENDPOINTS.items():
            if principal in allowed or endpoint.startswith("DELETE"):
                continue
            seen = await call(world, real, key)
            unseen = await call(ghost_world, fake, key)
            assert seen.status_code == unseen.status_code == 404, (endpoint, principal)

            def scrub(text: str, ids: tuple[str, ...]) -> str:
                for n, value in enumerate(ids):
                    text = text.replace(value, f"<id{n}>")
                return text

            assert scrub(seen.text, (world.agent_a, real.queued, real.claimed)) == scrub(
                unseen.text, (ghost_agent, fake.queued, fake.claimed)
            ), (endpoint, principal, seen.text, unseen.text)
            compared += 1
    assert compared >= 20


async def test_a_wrong_secret_and_an_unknown_prefix_answer_alike(api: Api) -> None:
    """The 401 does not reveal whether a key prefix exists."""
    prefix = api.api_key.split(".", 1)[0]
    answers = set()
    for key in (f"{prefix}.wrong", "jac_unknown00000.wrong", "no-dot", f"{prefix}."):
        r = await api.client.get(api.path("jobs"), headers={"X-API-Key": key})
        assert r.status_code == 401
        answers.add(r.text)
    r = await api.client.get(api.path("jobs"))
    assert r.status_code == 401  # no key at all may say so: it reveals nothing
    assert len(answers) == 1, answers
