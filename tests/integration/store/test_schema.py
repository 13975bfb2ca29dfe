"""The schema on both databases: migrations (versioned, idempotent, safe when replicas race),
upgrades of earlier schemas (v1, v4, v5), earlier releases' writes on this one's schema, and the
hot tables' layout."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobagentctl.models import ClaimState, JobStatus
from jobagentctl.server.store import Store, sqlite_path
from jobagentctl.server.store.queries import migrations
from jobagentctl.server.store.validation import check_slug
from tests.fixtures import pgsync
from tests.fixtures.databases import (
    _create,
    _drop,
    postgres_url,
    skip_or_fail_without_postgres,
    sql,
    with_database,
)
from tests.integration.store.conftest import Env, opened, set_status, stores

pytestmark = pytest.mark.anyio


# --- migrations and layout --------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    """A database with nothing in it (not cloned from the migrated template)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
        return
    skip_or_fail_without_postgres()
    name = f"jat_empty_{uuid.uuid4().hex[:12]}"
    _create(name)
    try:
        yield with_database(postgres_url(), name)
    finally:
        _drop(name)


def _all_versions(url: str) -> list[int]:
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    return [version for version, _ in migrations(dialect)]


def _now(url: str) -> str:
    """The database clock as SQL (epoch seconds on SQLite)."""
    return "now()" if url.startswith("postgres") else "(julianday('now') - 2440587.5) * 86400.0"


def _schema_at(url: str, version: int, rows: list[str]) -> None:
    """Make the empty database ``url`` one of schema ``version`` (migrations 1..version run and
    recorded as applied) holding ``rows`` (SQL statements)."""
    postgres = url.startswith("postgres")
    applied = ", ".join(f"({v}, {_now(url)})" for v in range(1, version + 1))
    script = [body for _, body in migrations("postgres" if postgres else "sqlite")][:version]
    script += [
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at "
        + ("timestamptz" if postgres else "REAL")
        + " NOT NULL)",
        f"INSERT INTO schema_migrations VALUES {applied}",
        *rows,
    ]
    for statement in script:
        if postgres:
            with pgsync.connect(url) as pg:
                pg.script(statement)  # no parameters: the scripts hold "%"
        else:
            conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            try:
                conn.executescript(statement)
            finally:
                conn.close()


async def test_migrate_applies_each_version_once(empty_url: str) -> None:
    async with opened(empty_url) as store:
        assert await store.schema_current() is False
        assert await store.migrate() == _all_versions(empty_url)
        assert await store.migrate() == []
        assert await store.schema_current() is True
    rows = sql(empty_url, "SELECT version FROM schema_migrations ORDER BY version")
    assert [r[0] for r in rows] == _all_versions(empty_url)
    applied_at = sql(empty_url, "SELECT applied_at FROM schema_migrations")
    assert all(r[0] is not None for r in applied_at)


async def test_racing_replicas_migrate_exactly_once(empty_url: str) -> None:
    async with stores(empty_url, 4) as replicas:
        results = await asyncio.gather(*(r.migrate() for r in replicas))
        assert sorted(v for applied in results for v in applied) == _all_versions(empty_url)
        assert all(await asyncio.gather(*(r.schema_current() for r in replicas)))


async def test_template_database_is_current(database_url: str) -> None:
    async with opened(database_url) as store:
        await store.migrate()
        assert await store.schema_current() is True


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_postgres_job_claim_is_built_for_hot_heartbeats(database_url: str) -> None:
    indexes = sql(database_url, "SELECT indexdef FROM pg_indexes WHERE tablename = 'job_claim'")
    assert len(indexes) == 1 and "job_claim_pkey" in indexes[0][0], indexes
    options = dict(
        sql(
            database_url,
            "SELECT relname, array_to_string(reloptions, ',') FROM pg_class"
            " WHERE relname IN ('job', 'job_claim')",
        )
    )
    assert "fillfactor=70" in options["job_claim"]
    assert "autovacuum_vacuum_scale_factor=0.02" in options["job"]
    columns = dict(
        sql(
            database_url,
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = 'job_claim'",
        )
    )
    assert columns["claim_expires_at"] == "timestamp with time zone"
    assert columns["claim_id"] == "uuid"


async def test_v4_upgrade_keeps_running_attempts_and_their_numbers(empty_url: str) -> None:
    """A v3 database (an open attempt row per live claim) migrated to v4: the running attempt
    moves to its claim row, the job counts its attempts, and ending it writes its row once."""
    postgres = empty_url.startswith("postgres")
    now = _now(empty_url)
    ws, agent, running, done = (str(uuid.uuid4()) for _ in range(4))
    claim = str(uuid.uuid4())
    rows = [
        f"INSERT INTO workspace (id, name, slug, created_at) VALUES ('{ws}', 'w', 'w', {now})",
        "INSERT INTO job_agent (id, workspace_id, name, type, config, metadata, created_at,"
        f" updated_at) VALUES ('{agent}', '{ws}', 'a', 'shell', '{{}}', '{{}}', {now}, {now})",
    ]
    for job, status in ((running, "inProgress"), (done, "successful")):
        rows.append(
            "INSERT INTO job (id, workspace_id, job_agent_id, status, created_at, updated_at,"
            f" started_at) VALUES ('{job}', '{ws}', '{agent}', '{status}', {now}, {now}, {now})"
        )
    rows += [
        # running: attempt 1 expired, attempt 2 open under a live claim (v3 wrote both rows)
        "INSERT INTO job_attempt (job_id, attempt, claim_id, job_agent_id, claimed_at, ended_at,"
        f" outcome) VALUES ('{running}', 1, '{uuid.uuid4()}', '{agent}', {now}, {now}, 'expired'),"
        f" ('{running}', 2, '{claim}', '{agent}', {now}, NULL, NULL),"
        f" ('{done}', 1, '{uuid.uuid4()}', '{agent}', {now}, {now}, 'completed')",
        "INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,"
        f" lease_seconds, attempt) VALUES ('{running}', '{agent}', {now},"
        + ("now() + interval '1 hour'" if postgres else f"{now} + 3600")
        + f", '{claim}', 3600, 2)",
    ]
    _schema_at(empty_url, 3, rows)
    async with opened(empty_url) as store:
        assert await store.migrate() == _all_versions(empty_url)[3:]
        found = sql(empty_url, "SELECT id, attempts FROM job ORDER BY attempts")
        assert [(str(i), n) for i, n in found] == [(done, 1), (running, 2)]
        attempts = await store.list_attempts(uuid.UUID(ws), uuid.UUID(running))
        assert [(a.attempt, a.outcome) for a in attempts] == [(1, "expired"), (2, None)]
        assert sql(empty_url, "SELECT count(*) FROM job_attempt WHERE ended_at IS NULL") == [(0,)]
        await set_status(
            store,
            uuid.UUID(ws),
            uuid.UUID(running),
            JobStatus.SUCCESSFUL,
            claim_id=uuid.UUID(claim),
        )
        attempts = await store.list_attempts(uuid.UUID(ws), uuid.UUID(running))
        assert [(a.attempt, a.outcome) for a in attempts] == [(1, "expired"), (2, "completed")]


async def test_v5_upgrade_gives_every_slug_ctrlplanes_form(empty_url: str) -> None:
    """Slugs v2 allowed (one character, "." and "_") are rewritten to ^[a-z0-9-]{3,50}$,
    unique; valid ones are left alone."""
    now = _now(empty_url)
    slugs = {str(uuid.uuid4()): slug for slug in ("w", "team.a", "team_a", "fine-slug")}
    rows = [
        f"INSERT INTO workspace (id, name, slug, created_at) VALUES ('{i}', 'w', '{s}', {now})"
        for i, s in slugs.items()
    ]
    _schema_at(empty_url, 4, rows)
    async with opened(empty_url) as store:
        assert await store.migrate() == _all_versions(empty_url)[4:]
        after = {str(i): s for i, s in sql(empty_url, "SELECT id, slug FROM workspace")}
        for workspace_id, old in slugs.items():
            new = after[workspace_id]
            assert re.fullmatch(r"[a-z0-9-]{3,50}", new), new
            if old == "fine-slug":
                assert new == old
            else:
                assert new == old.replace(".", "-").replace("_", "-") + "-" + workspace_id[:8]
            record = await store.entities.get_workspace_by_slug(new)
            assert record is not None and str(record.id) == workspace_id
        assert len(set(after.values())) == len(after)


# --- migration 0002 on a v1 database ----------------------------------------------------------


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


# --- the round-1 release's writes on this schema ----------------------------------------------


_NOW = {"sqlite": "(julianday('now') - 2440587.5) * 86400.0", "postgres": "now()"}


def _old(url: str, statement: str) -> str:
    """The old statement in the dialect's placeholders and clock."""
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    return statement.replace("?", "%s" if dialect == "postgres" else "?").replace(
        "NOW", _NOW[dialect]
    )


_OLD_CREATE_WORKSPACE = "INSERT INTO workspace (id, name, created_at) VALUES (?, ?, NOW)"


_OLD_CREATE_JOB = (
    "INSERT INTO job (id, job_agent_id, status, job_agent_config, dispatch_context, metadata,"
    " created_at, updated_at)"
    " SELECT ?, a.id, 'queued', a.config, '{}', '{}', NOW, NOW"
    " FROM job_agent AS a WHERE a.id = ? AND a.workspace_id = ? RETURNING id, status"
)


async def test_old_enqueue_lands_in_the_agents_workspace(env: Env) -> None:
    job_id = uuid4()
    returned = sql(
        env.url, _old(env.url, _OLD_CREATE_JOB), (str(job_id), str(env.agent), str(env.ws))
    )
    assert [(str(r[0]), r[1]) for r in returned] == [(str(job_id), "queued")]
    job = await env.store.entities.get_job(env.ws, job_id)
    assert job is not None and job.job_agent_id == env.agent
    # Claimable by this release as any job of its own.
    claimed = await env.store.claim_next(env.ws, env.agent, 60)
    assert claimed is not None and claimed.id == job_id


async def test_old_enqueue_for_an_unknown_agent_still_fails(env: Env) -> None:
    """The trigger fills nothing in for an agent that does not exist: no job, no error."""
    missing = str(uuid4())
    assert sql(env.url, _old(env.url, _OLD_CREATE_JOB), (str(uuid4()), missing, str(env.ws))) == []
    assert sql(env.url, "SELECT count(*) FROM job") == [(0,)]


async def test_old_create_workspace_gets_a_slug_as_the_store_derives(
    store: Store, database_url: str
) -> None:
    names = ["Team Alpha", "Team Alpha", "Ω"]
    ids = [uuid4() for _ in names]
    for workspace_id, name in zip(ids, names, strict=True):
        sql(database_url, _old(database_url, _OLD_CREATE_WORKSPACE), (str(workspace_id), name))
    slugs = []
    for workspace_id in ids:
        record = await store.entities.get_workspace(workspace_id)
        assert record is not None
        slugs.append(check_slug(record.slug))
    assert slugs[0] == "team-alpha"
    assert slugs[1] == f"team-alpha-{ids[1].hex[:8]}"
    assert len(set(slugs)) == 3
    # The slug this release's own create_workspace derives is still free to take.
    new = await store.entities.create_workspace("Team Beta")
    record = await store.entities.get_workspace(new)
    assert record is not None and record.slug == "team-beta"


async def test_sqlite_schema_edit_leaves_later_alters_sound(tmp_path: Path) -> None:
    """0006 edits two CREATE TABLE texts in place; the connection that ran it reloads its schema
    (``writable_schema = RESET``), so a later migration's ALTER TABLE in the same connection
    rewrites the new text, not the stale one (which would corrupt the schema)."""
    path = tmp_path / "alter.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for _, script in migrations("sqlite"):
            conn.executescript(script)
        conn.execute("ALTER TABLE job ADD COLUMN later TEXT")
        conn.execute("ALTER TABLE workspace ADD COLUMN later TEXT")
    finally:
        conn.close()
    fresh = sqlite3.connect(path)
    try:
        assert fresh.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        columns = {row[1]: row[4] for row in fresh.execute("PRAGMA table_info(job)")}
        assert columns["workspace_id"] == "''" and "later" in columns
    finally:
        fresh.close()
