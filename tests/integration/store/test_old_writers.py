"""The round-1 release's writes on a schema migrated by this one (a rolling upgrade: old
replicas still running while a new one migrated): its job INSERT names no workspace_id and its
workspace INSERT no slug. The statements are the old release's own (7fd85c5's queries.sql),
with its placeholders; the whole old server runs against HEAD in tests/upgrades."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from uuid import uuid4

import pytest

from jobagentctl.server.store import Store
from jobagentctl.server.store.queries import migrations
from jobagentctl.server.store.validation import check_slug
from tests.fixtures.databases import sql
from tests.integration.store.conftest import Env

pytestmark = pytest.mark.anyio

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
