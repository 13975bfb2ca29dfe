"""Migrations (versioned, idempotent, safe when replicas race) and schema details, on both
databases."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from collections.abc import Iterator

import pytest

from jobagentctl.errors import ServerUnavailable
from jobagentctl.models import JobStatus
from jobagentctl.server.store import open_store
from jobagentctl.server.store.queries import migrations
from tests.fixtures import pgsync
from tests.fixtures.databases import (
    _create,
    _drop,
    postgres_url,
    skip_or_fail_without_postgres,
    sql,
    with_database,
)
from tests.integration.store.conftest import opened, set_status, stores

pytestmark = pytest.mark.anyio


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


async def test_sqlite_pragmas(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    async with opened(url) as store:
        await store.migrate()
        assert sql(url, "PRAGMA journal_mode") == [("wal",)]


async def test_sqlite_unopenable_file_is_unavailable(tmp_path: object) -> None:
    blocker = f"{tmp_path}/file"
    with open(blocker, "w"):
        pass
    store = open_store(f"sqlite:///{blocker}/sub/db.sqlite")
    with pytest.raises(ServerUnavailable):
        await store.open()


async def test_postgres_unreachable_is_unavailable_without_the_password() -> None:
    store = open_store(
        "postgresql://someone:s3cret-pw@127.0.0.1:1/nowhere", pool_timeout=1.0, listen=False
    )
    with pytest.raises(ServerUnavailable) as caught:
        await store.open()
    chain: BaseException | None = caught.value
    while chain is not None:
        assert "s3cret-pw" not in str(chain)
        chain = chain.__cause__
    assert "s3cret-pw" not in caught.value.message


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
