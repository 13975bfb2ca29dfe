"""ctrlplane's V1 pull-agent behaviours, in-process, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.fixtures.server_app import Api, open_api

pytestmark = pytest.mark.anyio


async def test_queued_list_filtered_by_status(api: Api) -> None:
    agent = await api.agent()
    first = await api.enqueue(agent)
    second = await api.enqueue(agent)
    assert (await api.claim(agent, first["id"])).status_code == 200

    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"status": "queued"})
    assert r.status_code == 200
    assert [j["id"] for j in r.json()["items"]] == [second["id"]]
    assert r.json()["total"] == 1

    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"status": "inProgress"})
    assert [j["id"] for j in r.json()["items"]] == [first["id"]]

    # No status: every status, newest first.
    r = await api.call("GET", f"job-agents/{agent}/jobs")
    assert [j["id"] for j in r.json()["items"]] == [second["id"], first["id"]]


async def test_dispatch_context_omitted_by_default_and_included_on_request(api: Api) -> None:
    agent = await api.agent()
    await api.enqueue(agent, dispatchContext={"release": {"version": "1.2.3"}})

    r = await api.call("GET", f"job-agents/{agent}/jobs")
    (job,) = r.json()["items"]
    assert "dispatchContext" not in job  # absent, not null
    # Required fields stay present.
    assert job["releaseId"] == ""
    assert job["metadata"] == {}
    assert job["jobAgentConfig"] == {}

    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"includeDispatchContext": "true"})
    (job,) = r.json()["items"]
    assert job["dispatchContext"] == {"release": {"version": "1.2.3"}}

    # The workspace list omits it; a single job has it.
    r = await api.call("GET", "jobs")
    assert all("dispatchContext" not in j for j in r.json()["items"])
    assert (await api.job(job["id"]))["dispatchContext"] == {"release": {"version": "1.2.3"}}


async def test_only_the_requested_agents_jobs(api: Api) -> None:
    mine, other = await api.agent("mine"), await api.agent("other")
    job = await api.enqueue(mine)
    await api.enqueue(other)
    r = await api.call("GET", f"job-agents/{mine}/jobs")
    assert [j["id"] for j in r.json()["items"]] == [job["id"]]
    assert r.json()["total"] == 1
    assert all(j["jobAgentId"] == mine for j in r.json()["items"])


async def test_agent_outside_the_workspace_is_404(api: Api) -> None:
    other_ws = await api.store.entities.create_workspace("other")
    other_key = await api.new_key(ws=str(other_ws))
    foreign = str(uuid.uuid4())
    r = await api.call(
        "PUT",
        f"job-agents/{foreign}",
        {"name": "x", "type": "shell"},
        key=other_key,
        ws=str(other_ws),
    )
    assert r.status_code == 202
    # Through our workspace, the other workspace's agent does not exist.
    for method, path in [
        ("GET", f"job-agents/{foreign}/jobs"),
        ("GET", f"job-agents/{foreign}"),
        ("POST", f"job-agents/{foreign}/jobs"),
        ("POST", f"job-agents/{foreign}/claim"),
        ("DELETE", f"job-agents/{foreign}"),
    ]:
        r = await api.call(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["code"] == "NOT_FOUND"
    # An unknown agent too.
    r = await api.call("GET", f"job-agents/{uuid.uuid4()}/jobs")
    assert r.status_code == 404


async def test_empty_list_is_200_with_total_zero(api: Api) -> None:
    agent = await api.agent()
    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"status": "queued"})
    assert r.status_code == 200
    page = {"items": [], "total": 0, "limit": 50, "offset": 0}
    assert r.json() == {**page, "nextCursor": None}  # V1's shape, plus the cursor (none)


async def test_limit_offset_pages_with_the_right_total(api: Api) -> None:
    agent = await api.agent()
    ids = [(await api.enqueue(agent))["id"] for _ in range(7)]
    newest_first = list(reversed(ids))
    seen: list[str] = []
    for offset in (0, 3, 6):
        r = await api.call("GET", f"job-agents/{agent}/jobs", params={"limit": 3, "offset": offset})
        page = r.json()
        assert page["total"] == 7
        assert page["limit"] == 3
        assert page["offset"] == offset
        seen += [j["id"] for j in page["items"]]
    assert seen == newest_first
    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"limit": 3, "offset": 50})
    assert r.json()["items"] == []
    assert r.json()["total"] == 7


async def test_claim_sets_in_progress_and_started_at(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    assert job["status"] == "queued"
    assert job.get("startedAt") is None
    r = await api.claim(agent, job["id"])
    assert r.status_code == 200
    claimed = r.json()
    assert claimed["status"] == "inProgress"
    assert claimed["startedAt"]
    assert claimed["id"] == job["id"]
    # A V1 claim without a body from an agent without config is unleased: leases are opt-in
    # on V1, so a ctrlplane agent that knows nothing of them is never reaped.
    assert claimed["claimId"] is None
    assert claimed["leaseSeconds"] is None
    assert claimed["attempt"] == 1
    stored = await api.job(job["id"])
    assert stored["status"] == "inProgress"
    assert stored["startedAt"] == claimed["startedAt"]


async def test_second_claim_is_409(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    assert (await api.claim(agent, job["id"])).status_code == 200
    r = await api.claim(agent, job["id"])
    assert r.status_code == 409
    assert r.json()["code"] == "NOT_CLAIMABLE"
    assert r.json()["details"]["jobStatus"] == "inProgress"


async def test_random_job_id_is_404(api: Api) -> None:
    agent = await api.agent()
    r = await api.claim(agent, str(uuid.uuid4()))
    assert r.status_code == 404
    assert r.json()["code"] == "NOT_FOUND"
    assert (await api.call("GET", f"jobs/{uuid.uuid4()}")).status_code == 404
    assert (await api.heartbeat(str(uuid.uuid4()))).status_code == 404
    r = await api.status(str(uuid.uuid4()), {"status": "successful"})
    assert r.status_code == 404


async def test_another_agents_job_is_404(api: Api) -> None:
    mine, other = await api.agent("mine"), await api.agent("other")
    theirs = await api.enqueue(other)
    r = await api.claim(mine, theirs["id"])
    assert r.status_code == 404
    assert (await api.job(theirs["id"]))["status"] == "queued"


async def test_ten_concurrent_claims_exactly_one_wins(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    responses = await asyncio.gather(
        *(api.claim(agent, job["id"], {"leaseSeconds": 30}) for _ in range(10))
    )
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * 9
    assert all(r.json()["code"] == "NOT_CLAIMABLE" for r in responses if r.status_code == 409)
    assert len(await api.attempts(job["id"])) == 1


async def test_claimed_job_leaves_the_queued_list(api: Api) -> None:
    agent = await api.agent()
    jobs = [await api.enqueue(agent) for _ in range(3)]
    assert (await api.claim(agent, jobs[1]["id"])).status_code == 200
    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"status": "queued"})
    assert {j["id"] for j in r.json()["items"]} == {jobs[0]["id"], jobs[2]["id"]}
    assert r.json()["total"] == 2


async def test_agents_upsert_get_list_delete(api: Api) -> None:
    agent = str(uuid.uuid4())
    body = {"name": "builder", "type": "shell", "config": {"leaseSeconds": 30}}
    r = await api.call("PUT", f"job-agents/{agent}", body)
    assert r.status_code == 202
    assert r.json() == {"id": agent, "message": r.json()["message"]}
    r = await api.call("GET", f"job-agents/{agent}")
    assert r.status_code == 200
    assert r.json()["name"] == "builder"
    assert r.json()["config"] == {"leaseSeconds": 30}
    # Replace.
    body = {"name": "builder2", "type": "shell", "config": {}, "metadata": {"team": "a"}}
    assert (await api.call("PUT", f"job-agents/{agent}", body)).status_code == 202
    r = await api.call("GET", "job-agents")
    page = r.json()
    assert page["total"] == 1
    assert page["items"][0]["name"] == "builder2"
    assert page["items"][0]["metadata"] == {"team": "a"}
    r = await api.call("DELETE", f"job-agents/{agent}")
    assert r.status_code == 202
    assert r.json()["id"] == agent
    assert (await api.call("GET", f"job-agents/{agent}")).status_code == 404
    assert (await api.call("DELETE", f"job-agents/{agent}")).status_code == 404


async def test_workspace_job_list_and_status_filter(api: Api) -> None:
    a, b = await api.agent("a"), await api.agent("b")
    ja = await api.enqueue(a)
    jb = await api.enqueue(b)
    r = await api.call("GET", "jobs")
    assert r.json()["total"] == 2
    assert [j["id"] for j in r.json()["items"]] == [jb["id"], ja["id"]]
    assert (await api.claim(a, ja["id"])).status_code == 200
    r = await api.call("GET", "jobs", params={"status": "inProgress"})
    assert [j["id"] for j in r.json()["items"]] == [ja["id"]]
    # A repeated status parameter means "any of these".
    r = await api.call("GET", "jobs", params=[("status", "inProgress"), ("status", "queued")])
    assert r.json()["total"] == 2


async def test_status_update_is_202_with_id_and_message(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    claimed = (await api.claim(agent, job["id"], {"leaseSeconds": 30})).json()
    r = await api.status(
        job["id"],
        {
            "status": "successful",
            "claimId": claimed["claimId"],
            "message": "done",
            "externalId": "ext-1",
            "metadata": {"ctrlplane/links": {"log": "http://x"}},
        },
    )
    assert r.status_code == 202
    assert r.json()["id"] == job["id"]
    assert isinstance(r.json()["message"], str)
    stored = await api.job(job["id"])
    assert stored["status"] == "successful"
    assert stored["message"] == "done"
    assert stored["externalId"] == "ext-1"
    assert stored["completedAt"]
    assert stored["metadata"]["ctrlplane/links"] == {"log": "http://x"}


async def test_absent_optional_job_fields_are_omitted_not_null(api: Api) -> None:
    """ctrlplane's toJobResponse (apps/api/src/routes/v1/workspaces/jobs.ts, commit 66e0888)
    spreads externalId, message, startedAt, completedAt and dispatchContext in only when set."""
    optional = {"externalId", "message", "startedAt", "completedAt"}
    agent = await api.agent()
    created = await api.enqueue(agent)
    fetched = await api.job(created["id"])
    listed = (await api.call("GET", "jobs")).json()["items"][0]
    by_agent = (
        await api.call("GET", f"job-agents/{agent}/jobs", params={"includeDispatchContext": 1})
    ).json()["items"][0]
    for job in (created, fetched, listed, by_agent):
        assert not optional & job.keys(), job
        assert None not in job.values(), job
    assert "dispatchContext" not in listed
    claimed = (await api.claim(agent, created["id"])).json()  # V1: unleased
    assert claimed["startedAt"] and "completedAt" not in claimed and "message" not in claimed
    # Unleased: a claimed job's claim fields are there, null.
    assert claimed["claimId"] is None and claimed["leaseSeconds"] is None
    r = await api.status(created["id"], {"status": "successful", "message": "done"})
    assert r.status_code == 202
    done = await api.job(created["id"])
    assert done["message"] == "done" and done["completedAt"] and "externalId" not in done


async def test_workspace_by_slug_resolves_the_callers_own_workspace(api: Api) -> None:
    """ctrlplane's GET /v1/workspaces/slug/{workspaceSlug} (handlers.ts getWorkspaceBySlug,
    commit 66e0888): the workspace object; another workspace's slug is 404 here (a key learns
    nothing outside its workspace)."""
    record = await api.store.entities.get_workspace_by_slug("test")
    assert record is not None and str(record.id) == api.workspace_id
    agent = await api.agent()
    for key in (api.api_key, await api.new_key(agent)):
        r = await api.client.get("/api/v1/workspaces/slug/test", headers={"X-API-Key": key})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["id"] == api.workspace_id and body["slug"] == "test"
        assert body["name"] == "test" and body["createdAt"]
    other = await api.store.entities.create_workspace("jobs")  # a slug that is also a route segment
    other_key = await api.new_key(ws=str(other))
    r = await api.client.get("/api/v1/workspaces/slug/jobs", headers={"X-API-Key": other_key})
    assert r.status_code == 200 and r.json()["id"] == str(other)
    headers = {"X-API-Key": api.api_key}
    for slug in ("jobs", "nope"):
        r = await api.client.get(f"/api/v1/workspaces/slug/{slug}", headers=headers)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    assert (await api.client.get("/api/v1/workspaces/slug/test")).status_code == 401


async def test_workspace_by_slug_refuses_what_no_workspace_can_be_named(api: Api) -> None:
    """The slug route is an endpoint like the others: a slug outside SLUG_PATTERN is a 400."""
    headers = {"X-API-Key": api.api_key}
    for slug in ("ab", "Test", "a" * 51, "te_st"):
        r = await api.client.get(f"/api/v1/workspaces/slug/{slug}", headers=headers)
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", (slug, r.text)


async def test_regression_a_v1_cycle_costs_the_statements_of_a_v2_cycle(database_url: str) -> None:
    """A V1 agent's cycle — claim by id without a body, then its report without a claim id —
    cost four statements where the V2 cycle (claim-next, then the report with its claim id)
    costs two: a lookup of the agent for its configured lease before every claim, and the
    report as the locked transaction (4 round trips on PostgreSQL). The lease is read by the
    claim statement now, and a report on a job that no claim row holds is one statement.
    Counted at the store's connector (the key lookup and the throttled presence write aside:
    they are the same on both paths)."""
    async with open_api(database_url) as api:
        agent = await api.agent(config={"leaseSeconds": 45})
        plain = await api.agent("plain")
        connector: Any = api.store.db
        statements: list[str] = []
        depth = [0]
        for name in ("one", "all", "each", "locked"):
            _count_statements(connector, name, statements, depth)

        async def cycle(agent_id: str, *, v1: bool) -> tuple[list[str], dict[str, Any]]:
            job = await api.enqueue(agent_id)
            statements.clear()
            if v1:
                claimed = await api.claim(agent_id, job["id"])
            else:
                claimed = await api.claim_next(agent_id, {"leaseSeconds": 30})
            assert claimed.status_code == 200, claimed.text
            body: dict[str, Any] = {"status": "successful"}
            if not v1:
                body["claimId"] = claimed.json()["claimId"]
            done = await api.status(job["id"], body)
            assert done.status_code == 202, done.text
            spent = [s for s in statements if s not in ("get_api_key", "touch_agent")]
            return spent, claimed.json()

        for _ in range(2):  # the second round: what a steady agent loop pays
            v2, _ = await cycle(plain, v1=False)
            v1_unleased, unleased = await cycle(plain, v1=True)
            v1_configured, configured = await cycle(agent, v1=True)
        assert v2 == ["claim_next", "finish_claimed"], v2
        assert v1_unleased == ["claim_job", "finish_unclaimed"], v1_unleased
        assert unleased["leaseSeconds"] is None
        # The agent's configured lease, without a lookup; its report, without a claim id, on a
        # job a claim row holds, is the locked path's (after the one statement found the row).
        assert configured["leaseSeconds"] == 45
        assert v1_configured == ["claim_job", "finish_unclaimed", "locked"], v1_configured
        assert len(v1_unleased) <= len(v2)


def _count_statements(connector: Any, name: str, statements: list[str], depth: list[int]) -> None:
    """Record each call of ``connector.name`` made from outside the connector (PostgreSQL's
    ``each`` runs through its ``all``: one statement, counted once)."""
    method = getattr(connector, name)

    async def counting(query: str, *args: Any, **kwargs: Any) -> Any:
        if not depth[0]:
            statements.append("locked" if name == "locked" else query)
        depth[0] += 1
        try:
            return await method(query, *args, **kwargs)
        finally:
            depth[0] -= 1

    setattr(connector, name, counting)
