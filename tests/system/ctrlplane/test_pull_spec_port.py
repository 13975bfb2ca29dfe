"""ctrlplane's ``e2e/tests/api/job-agent-pull.spec.ts`` (commit 66e0888), case by case, against
**our** server on SQLite and PostgreSQL; then the V1 behaviours of ctrlplane's handlers that the
spec does not cover, which our server shares so that a V1 agent sees no difference.

The spec seeds jobs straight into ctrlplane's database; here they are made through the API
(``POST …/job-agents/{id}/jobs`` for queued, a claim by id for in_progress). One server per
database for the module, as the spec shares one workspace across its cases; each case makes its
own agents, as the spec's cases do.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.databases import (
    _create,
    _drop,
    postgres_url,
    skip_or_fail_without_postgres,
    with_database,
)
from tests.fixtures.live_server import LiveServer, LiveServerFactory


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def ours(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    workdir: Path = tmp_path_factory.mktemp(f"pull-spec-{request.param}")
    dbname = None
    if request.param == "sqlite":
        url = f"sqlite:///{workdir / 'jobagent.db'}"
    else:
        skip_or_fail_without_postgres()
        template: str = request.getfixturevalue("_pg_template")
        dbname = f"jat_{uuid.uuid4().hex[:16]}"
        _create(dbname, template)
        url = with_database(postgres_url(), dbname)
    servers = LiveServerFactory(url, workdir)
    try:
        yield servers()
    finally:
        servers.close()
        if dbname is not None:
            _drop(dbname)


def ok(server: LiveServer, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
    status, data = server.request(method, path, body)
    assert status == expect, (method, path, status, data)
    return data


def create_agent(server: LiveServer) -> str:
    agent = str(uuid.uuid4())
    body = {"name": f"pull-agent-{agent[:8]}", "type": "http-pull", "config": {}}
    ok(server, "PUT", f"job-agents/{agent}", body, expect=202)
    return agent


def seed_job(
    server: LiveServer, agent: str, status: str = "queued", dispatch_context: Any = None
) -> str:
    body = {"jobAgentConfig": {}, "dispatchContext": dispatch_context or {}}
    job: str = ok(server, "POST", f"job-agents/{agent}/jobs", body, expect=201)["id"]
    if status in ("in_progress", "successful"):
        ok(server, "POST", f"job-agents/{agent}/jobs/{job}/claim")
    if status == "successful":
        ok(server, "PUT", f"jobs/{job}/status", {"status": "successful"}, expect=202)
    return job


def list_jobs(server: LiveServer, agent: str, query: str = "") -> tuple[int, Any]:
    return server.request("GET", f"job-agents/{agent}/jobs{query}")


def claim(server: LiveServer, agent: str, job: str) -> tuple[int, Any]:
    return server.request("POST", f"job-agents/{agent}/jobs/{job}/claim")


# ---------- Retrieval ----------


def test_lists_an_agents_queued_jobs_filtered_by_status(ours: LiveServer) -> None:
    agent = create_agent(ours)
    queued = seed_job(ours, agent, "queued")
    in_progress = seed_job(ours, agent, "in_progress")
    status, page = list_jobs(ours, agent, "?status=queued")
    assert status == 200
    ids = [j["id"] for j in page["items"]]
    assert queued in ids
    assert in_progress not in ids


def test_omits_dispatch_context_by_default_and_includes_it_on_request(ours: LiveServer) -> None:
    agent = create_agent(ours)
    context = {"deployment": {"id": str(uuid.uuid4())}, "variables": {"region": "us-east-1"}}
    job = seed_job(ours, agent, "queued", context)
    _, without = list_jobs(ours, agent, "?status=queued")
    found = next(j for j in without["items"] if j["id"] == job)
    assert "dispatchContext" not in found  # toBeUndefined: absent, not null
    _, with_ctx = list_jobs(ours, agent, "?status=queued&includeDispatchContext=true")
    found = next(j for j in with_ctx["items"] if j["id"] == job)
    assert found["dispatchContext"] == context


def test_only_returns_jobs_for_the_requested_agent(ours: LiveServer) -> None:
    agent_a, agent_b = create_agent(ours), create_agent(ours)
    job_a, job_b = seed_job(ours, agent_a), seed_job(ours, agent_b)
    _, page = list_jobs(ours, agent_a, "?status=queued")
    ids = [j["id"] for j in page["items"]]
    assert job_a in ids
    assert job_b not in ids


def test_returns_404_listing_jobs_for_an_agent_not_in_the_workspace(ours: LiveServer) -> None:
    status, _ = list_jobs(ours, str(uuid.uuid4()))
    assert status == 404


def test_returns_an_empty_list_when_the_agent_has_no_queued_jobs(ours: LiveServer) -> None:
    agent = create_agent(ours)
    status, page = list_jobs(ours, agent, "?status=queued")
    assert status == 200
    assert page["items"] == []
    assert page["total"] == 0


def test_returns_all_queued_jobs_and_paginates_with_limit_and_offset(ours: LiveServer) -> None:
    agent = create_agent(ours)
    seeded = [seed_job(ours, agent) for _ in range(3)]
    status, every = list_jobs(ours, agent, "?status=queued")
    assert status == 200
    assert every["total"] == 3
    assert sorted(j["id"] for j in every["items"]) == sorted(seeded)
    _, first = list_jobs(ours, agent, "?status=queued&limit=2&offset=0")
    assert len(first["items"]) == 2
    assert (first["total"], first["limit"], first["offset"]) == (3, 2, 0)
    _, second = list_jobs(ours, agent, "?status=queued&limit=2&offset=2")
    assert len(second["items"]) == 1
    assert second["total"] == 3
    both = sorted(j["id"] for j in first["items"] + second["items"])
    assert both == sorted(seeded)


# ---------- Claiming ----------


def test_claims_a_queued_job_and_transitions_it_to_in_progress(ours: LiveServer) -> None:
    agent = create_agent(ours)
    context = {"variables": {"foo": "bar"}}
    job = seed_job(ours, agent, "queued", context)
    status, claimed = claim(ours, agent, job)
    assert status == 200
    assert claimed["id"] == job
    assert claimed["status"] == "inProgress"
    assert claimed["startedAt"] is not None
    assert claimed["dispatchContext"] == context
    row = ours.get_job(job)  # the spec reads the row; the API shows the same columns
    assert row["status"] == "inProgress"
    assert row["startedAt"] is not None


def test_returns_409_when_claiming_a_job_that_is_no_longer_queued(ours: LiveServer) -> None:
    agent = create_agent(ours)
    job = seed_job(ours, agent)
    assert claim(ours, agent, job)[0] == 200
    assert claim(ours, agent, job)[0] == 409


def test_returns_404_claiming_a_non_existent_job(ours: LiveServer) -> None:
    agent = create_agent(ours)
    assert claim(ours, agent, str(uuid.uuid4()))[0] == 404


def test_returns_404_claiming_a_job_that_belongs_to_a_different_agent(ours: LiveServer) -> None:
    agent_a, agent_b = create_agent(ours), create_agent(ours)
    job = seed_job(ours, agent_b)
    assert claim(ours, agent_a, job)[0] == 404


def test_hands_a_job_to_exactly_one_of_many_concurrent_claimers(ours: LiveServer) -> None:
    agent = create_agent(ours)
    job = seed_job(ours, agent)
    statuses: list[int] = []
    start = threading.Barrier(10)
    lock = threading.Lock()

    def claimer() -> None:
        start.wait(60)
        status, _ = claim(ours, agent, job)
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=claimer) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert statuses.count(200) == 1
    assert statuses.count(409) == 9


def test_a_claimed_job_no_longer_appears_in_the_queued_list(ours: LiveServer) -> None:
    agent = create_agent(ours)
    job = seed_job(ours, agent)
    assert claim(ours, agent, job)[0] == 200
    _, page = list_jobs(ours, agent, "?status=queued")
    assert job not in [j["id"] for j in page["items"]]


# ---------- V1 behaviours of ctrlplane's handlers, beyond the spec ----------


def test_v1_delete_agent_keeps_its_jobs(ours: LiveServer) -> None:
    """job-agents.ts deleteJobAgent + schema job.job_agent_id ON DELETE SET NULL."""
    agent = create_agent(ours)
    job = seed_job(ours, agent)
    ok(ours, "DELETE", f"job-agents/{agent}", expect=202)
    kept = ours.get_job(job)
    assert kept["jobAgentId"] == ""
    listed = ok(ours, "GET", "jobs?limit=1000")
    assert job in [j["id"] for j in listed["items"]]


def test_v1_absent_optional_fields_are_omitted(ours: LiveServer) -> None:
    """jobs.ts toJobResponse: externalId, message, startedAt, completedAt, dispatchContext are
    left out when null, never sent as null."""
    agent = create_agent(ours)
    job = ours.get_job(seed_job(ours, agent))
    for name in ("externalId", "message", "startedAt", "completedAt"):
        assert name not in job, job
    _, page = list_jobs(ours, agent, "?status=queued")
    assert "dispatchContext" not in page["items"][0]


def test_v1_status_update_without_claim_id_accepts_any_transition(ours: LiveServer) -> None:
    """jobs.ts updateJobStatus: no state machine; a failed job can be queued again, and its
    next claim is a new attempt."""
    agent = create_agent(ours)
    job = seed_job(ours, agent, "in_progress")
    ok(ours, "PUT", f"jobs/{job}/status", {"status": "failure"}, expect=202)
    ok(ours, "PUT", f"jobs/{job}/status", {"status": "queued"}, expect=202)
    assert ours.get_job(job)["status"] == "queued"
    assert claim(ours, agent, job)[0] == 200
    attempts = ok(ours, "GET", f"jobs/{job}/attempts")
    assert [a["attempt"] for a in attempts] == [1, 2]
    ok(ours, "PUT", f"jobs/{job}/status", {"status": "cancelled"}, expect=202)
    ok(ours, "PUT", f"jobs/{job}/status", {"status": "queued"}, expect=202)
    assert ours.get_job(job)["status"] == "queued"


def test_v1_workspace_slug_route(ours: LiveServer) -> None:
    """handlers.ts getWorkspaceBySlug: GET /v1/workspaces/slug/{slug} → the workspace."""
    status, workspace = ours.request("GET", f"/api/v1/workspaces/{ours.workspace_id}")
    slug = workspace["slug"] if status == 200 else "default"  # `server init` makes "default"
    found = ok(ours, "GET", f"/api/v1/workspaces/slug/{slug}")
    assert found["id"] == ours.workspace_id
    assert ours.request("GET", "/api/v1/workspaces/slug/no-such-workspace")[0] == 404
