"""The store's entities on both databases: workspaces (and their slugs), API keys, agents
(deleting one keeps its jobs) and jobs (create, list, JSON values)."""

from __future__ import annotations

import hashlib
import time
from uuid import RFC_4122, uuid4

import pytest

from jobagentctl.errors import Conflict, NotFound, ValidationError
from jobagentctl.models import JobStatus
from jobagentctl.server.store import Store
from jobagentctl.server.store.validation import slugify
from tests.fixtures.databases import sql
from tests.integration.store.conftest import Env, list_jobs, set_status

pytestmark = pytest.mark.anyio


# --- workspaces, keys, agents, jobs -----------------------------------------------------------


async def test_workspaces(store: Store) -> None:
    ws = await store.entities.create_workspace("first")
    assert await store.entities.workspace_exists(ws)
    assert not await store.entities.workspace_exists(uuid4())


async def test_api_keys_store_only_what_they_are_given(env: Env) -> None:
    secret = "jak_s3cr3t-value-never-stored"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    key_id = await env.store.entities.create_api_key(env.ws, None, "pfx1", digest)
    agent_key = await env.store.entities.create_api_key(env.ws, env.agent, "pfx2", "h2")
    record = await env.store.entities.get_api_key("pfx1")
    assert record is not None
    assert (record.id, record.workspace_id, record.job_agent_id) == (key_id, env.ws, None)
    assert record.secret_hash == digest and record.revoked_at is None
    scoped = await env.store.entities.get_api_key("pfx2")
    assert scoped is not None and scoped.id == agent_key and scoped.job_agent_id == env.agent
    assert await env.store.entities.get_api_key("nope") is None
    # The table holds the hash and nothing derived from the secret.
    dump = repr(sql(env.url, "SELECT * FROM api_key"))
    assert secret not in dump and digest in dump

    assert await env.store.entities.revoke_api_key(key_id) is True
    assert await env.store.entities.revoke_api_key(key_id) is False  # already revoked
    assert await env.store.entities.revoke_api_key(uuid4()) is False
    revoked = await env.store.entities.get_api_key("pfx1")
    assert revoked is not None and revoked.revoked_at is not None


async def test_api_key_scope_and_prefix_checks(env: Env) -> None:
    with pytest.raises(NotFound):
        await env.store.entities.create_api_key(uuid4(), None, "p-a", "h")
    with pytest.raises(NotFound):
        await env.store.entities.create_api_key(env.ws, uuid4(), "p-b", "h")
    other_ws = await env.store.entities.create_workspace("other")
    with pytest.raises(NotFound):  # an agent of another workspace
        await env.store.entities.create_api_key(other_ws, env.agent, "p-c", "h")
    await env.store.entities.create_api_key(env.ws, None, "dup", "h")
    with pytest.raises(Conflict):
        await env.store.entities.create_api_key(env.ws, None, "dup", "h")


async def test_upsert_agent_creates_replaces_and_respects_workspaces(env: Env) -> None:
    agent_id = uuid4()
    created = await env.store.entities.upsert_agent(
        env.ws, agent_id, "a", "shell", {"leaseSeconds": 30}, {"team": "x"}
    )
    assert (created.id, created.workspace_id, created.name) == (agent_id, env.ws, "a")
    assert created.config == {"leaseSeconds": 30} and created.metadata == {"team": "x"}
    replaced = await env.store.entities.upsert_agent(env.ws, agent_id, "b", "k8s", {}, None)
    assert (replaced.name, replaced.type, replaced.config) == ("b", "k8s", {})
    assert replaced.metadata == {"team": "x"}  # metadata None keeps what was there
    assert await env.store.entities.get_agent(env.ws, agent_id) == replaced

    other_ws = await env.store.entities.create_workspace("other")
    with pytest.raises(NotFound):
        await env.store.entities.upsert_agent(other_ws, agent_id, "steal", "shell", {}, None)
    assert await env.store.entities.get_agent(other_ws, agent_id) is None
    with pytest.raises(NotFound):
        await env.store.entities.upsert_agent(uuid4(), uuid4(), "x", "shell", {}, None)
    with pytest.raises(ValidationError):
        await env.store.entities.upsert_agent(
            env.ws, uuid4(), "x", "shell", {"n": float("inf")}, None
        )


async def test_list_and_delete_agents(env: Env) -> None:
    agents, total = await env.store.entities.list_agents(env.ws, limit=1, offset=0)
    assert total == 2 and [a.id for a in agents] == [env.agent]
    agents, total = await env.store.entities.list_agents(env.ws, limit=10, offset=1)
    assert total == 2 and [a.id for a in agents] == [env.other_agent]
    agents, total = await env.store.entities.list_agents(env.ws, limit=10, offset=5)
    assert (agents, total) == ([], 2)
    assert await env.store.entities.list_agents(
        await env.store.entities.create_workspace("empty"), 10, 0
    ) == (
        [],
        0,
    )

    job = await env.job()
    await env.store.entities.create_api_key(env.ws, env.agent, "agent-key", "h")
    await env.store.claim_job(env.ws, env.agent, job.id, 60)
    assert (
        await env.store.entities.delete_agent(
            await env.store.entities.create_workspace("x"), env.agent
        )
        is False
    )
    assert await env.store.entities.delete_agent(env.ws, env.agent) is True
    assert await env.store.entities.delete_agent(env.ws, env.agent) is False
    # Its keys go with it; its jobs stay (V1 parity: see
    # test_deleting_an_agent_keeps_its_jobs_readable).
    assert await env.store.entities.get_api_key("agent-key") is None
    kept = await env.store.entities.get_job(env.ws, job.id)
    assert kept is not None and kept.agent_id is None
    # The running attempt lives in its claim row; its job_attempt row is written as it ends.
    for table, rows in (("job", 1), ("job_claim", 1), ("job_attempt", 0)):
        assert sql(env.url, f"SELECT count(*) FROM {table}") == [(rows,)], table
    assert [a.attempt for a in await env.store.list_attempts(env.ws, job.id)] == [1]


async def test_create_job_defaults_and_scopes(env: Env) -> None:
    job = await env.job(dispatch_context={"release": "r1"}, metadata={"m": "1"})
    assert job.status == JobStatus.QUEUED
    assert job.job_agent_id == env.agent
    assert job.job_agent_config == {"k": "v"}  # the agent's config by default
    assert job.metadata == {"m": "1"} and job.dispatch_context == {"release": "r1"}
    assert job.started_at is None and job.completed_at is None
    assert job.created_at == job.updated_at

    own = await env.job(job_agent_config={"image": "x"})
    assert own.job_agent_config == {"image": "x"} and own.metadata == {}

    assert await env.store.entities.get_job(env.ws, job.id) == job
    assert await env.store.entities.get_job(env.ws, job.id, agent_scope=env.agent) == job
    assert await env.store.entities.get_job(env.ws, job.id, agent_scope=env.other_agent) is None
    assert (
        await env.store.entities.get_job(await env.store.entities.create_workspace("o"), job.id)
        is None
    )
    assert await env.store.entities.get_job(env.ws, uuid4()) is None

    with pytest.raises(NotFound):
        await env.store.entities.create_job(env.ws, uuid4(), None, None, None)
    with pytest.raises(NotFound):
        other_ws = await env.store.entities.create_workspace("o")
        await env.store.entities.create_job(other_ws, env.agent, None, None, None)


async def test_job_ids_are_time_ordered(env: Env) -> None:
    """A job's id is a UUIDv7 whose first 48 bits are its creation time in milliseconds, so
    jobs created later have ids no smaller in those bits (they sit together in the indexes)."""
    before = time.time_ns() // 1_000_000
    jobs = [await env.job() for _ in range(20)]
    after = time.time_ns() // 1_000_000
    millis = [job.id.int >> 80 for job in jobs]
    assert {job.id.version for job in jobs} == {7}
    assert {job.id.variant for job in jobs} == {RFC_4122}
    assert before <= millis[0] and millis == sorted(millis) and millis[-1] <= after
    assert len({job.id for job in jobs}) == 20


async def test_list_jobs_newest_first_with_filters(env: Env) -> None:
    jobs = [await env.job(dispatch_context={"n": n}) for n in range(5)]
    other = await env.job(agent=env.other_agent)
    await env.store.claim_job(env.ws, env.agent, jobs[1].id, None)

    listed, total = await list_jobs(env.store, env.ws, agent_id=env.agent)
    assert total == 5
    assert [j.id for j in listed] == [j.id for j in reversed(jobs)]
    assert all(j.dispatch_context is None for j in listed)

    queued, total = await list_jobs(
        env.store,
        env.ws,
        agent_id=env.agent,
        statuses=[JobStatus.QUEUED],
        include_dispatch_context=True,
        limit=2,
        offset=1,
    )
    assert total == 4
    assert [j.id for j in queued] == [jobs[3].id, jobs[2].id]
    assert [j.dispatch_context for j in queued] == [{"n": 3}, {"n": 2}]

    both, total = await list_jobs(
        env.store, env.ws, statuses=[JobStatus.IN_PROGRESS, JobStatus.QUEUED]
    )
    assert total == 6 and both[0].id == other.id

    none, total = await list_jobs(
        env.store, env.ws, agent_id=env.agent, statuses=[JobStatus.FAILURE]
    )
    assert (none, total) == ([], 0)
    past_end, total = await list_jobs(env.store, env.ws, offset=100)
    assert (past_end, total) == ([], 6)


async def test_json_values_round_trip_and_bad_ones_are_refused(env: Env) -> None:
    nested = {"a": [1, 2.5, None, True], "b": {"c": "ü 😀"}, "empty": {}}
    job = await env.job(dispatch_context=nested, metadata={"k": nested})
    fetched = await env.store.entities.get_job(env.ws, job.id)
    assert fetched is not None and fetched.dispatch_context == nested
    assert fetched.metadata == {"k": nested}
    with pytest.raises(ValidationError):
        await env.job(metadata={"x": float("nan")})


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_postgres_refuses_nul_characters_as_validation_errors(env: Env) -> None:
    with pytest.raises(ValidationError) as caught:
        await env.job(metadata={"x": "a\u0000b"})
    assert "\u0000" not in caught.value.message
    job = await env.job()
    with pytest.raises(ValidationError):
        await set_status(env.store, env.ws, job.id, JobStatus.FAILURE, message="nul \u0000 here")


# --- deleting an agent keeps its jobs (V1 parity) ---------------------------------------------


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


# --- workspace slugs (V1 parity) --------------------------------------------------------------


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
