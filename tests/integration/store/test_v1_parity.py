"""V1 parity on the store (what agents of ctrlplane's V1 API expect), on both databases:
deleting an agent keeps its jobs, a status write without a claim id takes any transition (an
operator's requeue of a finished job; its next claim is attempt N+1), writes with a claim id
stay fenced, workspaces have unique slugs, and migration 0002 carries a v1 database over
without losing a row."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobagentctl.errors import ClaimLost, ClaimMismatch, Conflict, NotFound, ValidationError
from jobagentctl.models import AttemptOutcome, ClaimState, JobStatus
from jobagentctl.server.store import Store, sqlite_path
from jobagentctl.server.store.queries import migrations
from jobagentctl.server.store.validation import slugify
from tests.fixtures import pgsync
from tests.fixtures.databases import (
    _create,
    _drop,
    expire_claims,
    postgres_url,
    skip_or_fail_without_postgres,
    sql,
    with_database,
)
from tests.integration.store.conftest import Env, list_jobs, opened

pytestmark = pytest.mark.anyio


# --- deleting an agent keeps its jobs -----------------------------------------------------------


async def test_deleting_an_agent_keeps_its_jobs_readable(env: Env) -> None:
    queued = await env.job(metadata={"k": 1})
    done = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, done.id, 60)
    await env.status(done.id, JobStatus.SUCCESSFUL, claim_id=claimed.claim_id)
    mine = await env.job(env.other_agent)
    assert await env.store.entities.delete_agent(env.ws, env.agent) is True

    for job_id in (queued.id, done.id):
        kept = await env.store.entities.get_job(env.ws, job_id)
        assert kept is not None and kept.job_agent_id == "" and kept.agent_id is None
    stored = await env.store.entities.get_job(env.ws, queued.id)
    assert stored is not None and stored.status == JobStatus.QUEUED and stored.metadata == {"k": 1}
    jobs, total = await list_jobs(env.store, env.ws, limit=10)
    assert total == 3 and {j.id for j in jobs} == {queued.id, done.id, mine.id}
    assert [a.attempt for a in await env.store.list_attempts(env.ws, done.id)] == [1]
    # Still scoped to the workspace, and no other agent can claim them.
    assert (
        await env.store.entities.get_job(
            await env.store.entities.create_workspace("else"), queued.id
        )
        is None
    )
    assert await env.store.claim_next(env.ws, env.other_agent, 30) is not None  # its own job
    assert await env.store.claim_next(env.ws, env.other_agent, 30) is None
    with pytest.raises(NotFound):
        await env.store.claim_job(env.ws, env.other_agent, queued.id, 30)
    # An operator can still end or cancel them without a claim id.
    cancelled = await env.status(queued.id, JobStatus.CANCELLED)
    assert cancelled.status == JobStatus.CANCELLED and cancelled.job_agent_id == ""


async def test_an_in_flight_claim_of_a_deleted_agent_is_reaped(env: Env) -> None:
    job = await env.job()
    claimed = await env.store.claim_job(env.ws, env.agent, job.id, 60)
    await env.job(env.other_agent)
    other = await env.store.claim_next(env.ws, env.other_agent, 60)
    assert other is not None
    assert await env.store.entities.delete_agent(env.ws, env.agent) is True

    # The claim row keeps the agent it was made with; the lease still works by claim id.
    claims, total = await env.store.list_claims(
        env.ws, agent_id=None, state=ClaimState.ALL, limit=10, offset=0
    )
    assert total == 2
    assert {c.job_id: c.job_agent_id for c in claims}[job.id] == env.agent
    beat = await env.store.heartbeat(env.ws, job.id, claimed.claim_id, None)
    assert beat.attempt == 1

    expire_claims(env.url)
    result = await env.store.reap(500, 0)
    assert (result.requeued, result.failed) == (2, 0)
    requeued = await env.store.entities.get_job(env.ws, job.id)
    assert (
        requeued is not None and requeued.status == JobStatus.QUEUED and requeued.agent_id is None
    )
    attempts = await env.store.list_attempts(env.ws, job.id)
    assert [(a.attempt, a.outcome, a.job_agent_id) for a in attempts] == [
        (1, AttemptOutcome.EXPIRED, env.agent)
    ]
    assert await env.store.claim_next(env.ws, env.other_agent, 60) is not None  # its own
    with pytest.raises(ClaimLost):
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=claimed.claim_id)


# --- a status write without a claim id takes any transition --------------------------------------


@pytest.mark.parametrize("ending", [JobStatus.FAILURE, JobStatus.CANCELLED])
async def test_requeue_of_a_finished_job_and_its_next_attempt(env: Env, ending: JobStatus) -> None:
    job = await env.job()
    first = await env.store.claim_next(env.ws, env.agent, 60)
    assert first is not None and first.attempt == 1
    finished = await env.status(job.id, ending, claim_id=first.claim_id)
    assert finished.completed_at is not None

    requeued = await env.status(job.id, JobStatus.QUEUED)  # an operator, no claim id
    assert requeued.status == JobStatus.QUEUED
    assert requeued.completed_at is None  # no longer finished
    assert requeued.started_at == finished.started_at  # the last attempt's start, kept

    second = await env.store.claim_next(env.ws, env.agent, 60)
    assert second is not None and second.id == job.id and second.attempt == 2
    assert second.claim_id != first.claim_id
    assert second.started_at is not None and second.started_at >= finished.started_at  # type: ignore[operator]
    attempts = await env.store.list_attempts(env.ws, job.id)
    expected_first = AttemptOutcome.CANCELLED if ending == JobStatus.CANCELLED else "completed"
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, expected_first), (2, None)]

    # Writes with a claim id keep every fencing rule: the first attempt's id is stale.
    with pytest.raises(ClaimMismatch):
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=first.claim_id)
    done = await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=second.claim_id)
    assert done.status == JobStatus.SUCCESSFUL
    assert (
        await env.status(job.id, JobStatus.SUCCESSFUL, claim_id=second.claim_id) == done
    )  # repeat
    with pytest.raises(ClaimLost):
        await env.status(job.id, JobStatus.FAILURE, claim_id=second.claim_id)


async def test_any_transition_without_a_claim_id(env: Env) -> None:
    job = await env.job()
    done = await env.status(job.id, JobStatus.SUCCESSFUL)
    assert done.completed_at is not None
    again = await env.status(job.id, JobStatus.SUCCESSFUL)  # a repeat changes nothing
    assert again == done
    failed = await env.status(job.id, JobStatus.FAILURE)  # terminal → another terminal
    assert failed.status == JobStatus.FAILURE and failed.completed_at is not None
    pending = await env.status(job.id, JobStatus.PENDING)  # terminal → not terminal
    assert pending.status == JobStatus.PENDING and pending.completed_at is None


# --- workspace slugs ----------------------------------------------------------------------------


async def test_workspace_slugs(store: Store) -> None:
    first = await store.entities.create_workspace("My Team / Prod!")
    record = await store.entities.get_workspace(first)
    assert record is not None and record.slug == "my-team-prod" and record.name == "My Team / Prod!"
    # A derived slug that is taken gets 8 characters of the new id.
    second = await store.entities.create_workspace("my team prod")
    record2 = await store.entities.get_workspace(second)
    assert record2 is not None and record2.slug == f"my-team-prod-{second.hex[:8]}"
    explicit = await store.entities.create_workspace("whatever", slug="ops-blue-1")
    found = await store.entities.get_workspace_by_slug("ops-blue-1")
    assert found is not None and found.id == explicit
    assert await store.entities.get_workspace_by_slug("OPS-BLUE-1") is None  # exact match only
    assert await store.entities.get_workspace_by_slug("nope") is None
    assert await store.entities.get_workspace(uuid4()) is None
    with pytest.raises(Conflict):
        await store.entities.create_workspace("again", slug="ops-blue-1")
    # ctrlplane's Workspace.slug: ^[a-z0-9-]+$, 3-50 characters.
    for bad in ("", "ab", "Upper", "has space", "a/b", "ops.blue", "a_b", "x" * 51):
        with pytest.raises(ValidationError):
            await store.entities.create_workspace("bad", slug=bad)
    assert (await store.entities.get_workspace_by_slug("workspace")) is None
    nothing = await store.entities.create_workspace("!!!")
    named = await store.entities.get_workspace(nothing)
    assert named is not None and named.slug == "workspace"


def test_slugify() -> None:
    assert slugify("Ops -- Blue") == "ops-blue"
    assert slugify("  a_b.c  ") == "a-b-c"
    assert slugify("ÉTÉ 2026") == "t-2026"
    assert slugify("x" * 60 + "-y") == "x" * 50
    assert slugify("") == "workspace"


# --- migration 0002 on a v1 database --------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def v1_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    """A database at schema version 1 (migration 0001 only)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/v1.db"
        conn = sqlite3.connect(sqlite_path(url))
        conn.executescript(migrations("sqlite")[0][1])
        conn.execute("PRAGMA foreign_keys = ON")
        conn.close()
        yield url
        return
    skip_or_fail_without_postgres()
    name = f"jat_v1_{uuid.uuid4().hex[:12]}"
    _create(name)
    try:
        url = with_database(postgres_url(), name)
        with pgsync.connect(url) as pg:
            pg.script(migrations("postgres")[0][1])
        yield url
    finally:
        _drop(name)


def _v1_rows(url: str) -> dict[str, Any]:
    """Two workspaces of the same name, an agent, a done job, a leased job (claim + attempt)."""
    pg = url.startswith("postgres")
    now = "now()" if pg else "(julianday('now') - 2440587.5) * 86400.0"
    ids = {k: str(uuid4()) for k in ("ws1", "ws2", "agent", "done", "leased", "claim")}
    mark = "%s" if pg else "?"

    def run(statement: str, *params: str) -> None:
        sql(url, statement.replace("?", mark).replace("NOW", now), params)

    run(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at "
        + ("timestamptz" if pg else "REAL")
        + " NOT NULL)"
    )
    run("INSERT INTO schema_migrations VALUES (1, NOW)")
    run("INSERT INTO workspace (id, name, created_at) VALUES (?, 'Team A', NOW)", ids["ws1"])
    run(
        "INSERT INTO workspace (id, name, created_at) VALUES (?, 'team a', NOW + "
        + ("interval '1 second'" if pg else "1")
        + ")",
        ids["ws2"],
    )
    run(
        "INSERT INTO job_agent (id, workspace_id, name, type, created_at, updated_at)"
        " VALUES (?, ?, 'a', 'shell', NOW, NOW)",
        ids["agent"],
        ids["ws1"],
    )
    for job, status in (("done", "successful"), ("leased", "inProgress")):
        run(
            "INSERT INTO job (id, job_agent_id, status, created_at, updated_at)"
            f" VALUES (?, ?, '{status}', NOW, NOW)",
            ids[job],
            ids["agent"],
        )
    run(
        "INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at)"
        " VALUES (?, 1, ?, ?, NOW)",
        ids["leased"],
        ids["claim"],
        ids["agent"],
    )
    run(
        "INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,"
        " lease_seconds, attempt) VALUES (?, ?, NOW, NOW, ?, 60, 1)",
        ids["leased"],
        ids["agent"],
        ids["claim"],
    )
    return ids


async def test_migration_0002_carries_a_v1_database_over(v1_url: str) -> None:
    ids = _v1_rows(v1_url)
    options = {} if v1_url.startswith("sqlite") else {"listen": False}
    async with opened(v1_url, **options) as store:
        assert await store.schema_current() is False
        assert await store.migrate() == [v for v, _ in migrations(store.dialect)][1:]
        first = await store.entities.get_workspace(UUID(ids["ws1"]))
        second = await store.entities.get_workspace(UUID(ids["ws2"]))
        assert first is not None and first.slug == "team-a"
        assert second is not None and second.slug == f"team-a-{ids['ws2'][:8]}"
        ws = UUID(ids["ws1"])
        for job in ("done", "leased"):
            kept = await store.entities.get_job(ws, UUID(ids[job]))
            assert kept is not None and kept.agent_id == UUID(ids["agent"]), job
        assert await store.entities.get_job(UUID(ids["ws2"]), UUID(ids["done"])) is None
        claims, total = await store.list_claims(
            ws, agent_id=None, state=ClaimState.ALL, limit=10, offset=0
        )
        assert total == 1 and claims[0].claim_id == UUID(ids["claim"])
        assert len(await store.list_attempts(ws, UUID(ids["leased"]))) == 1
        # The new rules hold on the migrated tables.
        assert await store.entities.delete_agent(ws, UUID(ids["agent"])) is True
        orphan = await store.entities.get_job(ws, UUID(ids["done"]))
        assert orphan is not None and orphan.agent_id is None
        assert (await store.reap(100, 0)).requeued == 1
