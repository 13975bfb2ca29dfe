"""The schema window, on both databases: each applied version is recorded with its compat
header; a database migrated past this release (a fake newer version row, as a later release
would leave it) is served when every newer migration is ``expand``, refused otherwise —
``server start`` and ``server migrate`` exit 2 with one line, ``/readyz`` answers 503 with the
reason — and ``server migrate`` says the database is newer instead of "nothing to do"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobagentctl.cli.app import app
from jobagentctl.errors import SchemaTooNew, ServerUnavailable
from jobagentctl.routes import Routes
from jobagentctl.server.store import Store, open_store
from jobagentctl.server.store.queries import migrations
from tests.fixtures.cli import clean_env, run_cli
from tests.fixtures.databases import sql
from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio


def _known(url: str) -> int:
    return len(migrations("sqlite" if url.startswith("sqlite") else "postgres"))


def _future(url: str, compat: str | None, ahead: int = 1) -> int:
    """Record version ``known + ahead`` as applied by a newer release with ``compat``."""
    version = _known(url) + ahead
    p = "?" if url.startswith("sqlite") else "%s"
    now = "(julianday('now') - 2440587.5) * 86400.0" if url.startswith("sqlite") else "now()"
    sql(
        url,
        f"INSERT INTO schema_migrations (version, applied_at, compat) VALUES ({p}, {now}, {p})",
        [version, compat],
    )
    return version


async def test_each_version_is_recorded_with_its_header(store: Store, database_url: str) -> None:
    rows = dict(sql(database_url, "SELECT version, compat FROM schema_migrations"))
    assert rows[_known(database_url)] == "expand"  # the newest (headed) migration
    assert rows[1] is None  # the first ones predate the headers


async def test_newer_expand_only_schema_is_served(store: Store, database_url: str) -> None:
    _future(database_url, "expand")
    newest = _future(database_url, "expand", ahead=2)
    assert await store.migrate() == []
    window = await store.schema_window()
    assert (window.known, window.newest) == (_known(database_url), newest)
    assert window.problem() is None
    note = window.note()
    assert note is not None and f"version {newest}," in note and "runs on it" in note
    assert await store.readiness() is None


@pytest.mark.parametrize("compat", ["contract", None, "shrink"])
async def test_newer_schema_not_expand_only_is_refused(
    store: Store, database_url: str, compat: str | None
) -> None:
    _future(database_url, "expand")
    blocking = _future(database_url, compat, ahead=2)
    with pytest.raises(SchemaTooNew) as raised:
        await store.migrate()
    assert raised.value.details == {
        "schemaVersion": blocking,
        "releaseSchemaVersion": _known(database_url),
        "incompatibleVersions": [blocking],
    }
    problem = await store.readiness()
    assert isinstance(problem, SchemaTooNew) and problem.message == raised.value.message


async def test_pending_migrations_are_a_reason(database_url: str) -> None:
    opened = open_store(database_url)
    await opened.open()
    try:
        await opened.migrate()
        sql(database_url, f"DELETE FROM schema_migrations WHERE version = {_known(database_url)}")
        problem = await opened.readiness()
        assert isinstance(problem, ServerUnavailable)
        assert problem.message == f"migrations pending: {_known(database_url)}"
    finally:
        await opened.close()


async def test_readyz_says_why_a_running_server_cannot_serve(api: Api) -> None:
    assert (await api.client.get(Routes.READYZ)).status_code == 200
    # A newer release migrated the database under this running server (a contract migration).
    version = _future(api.database_url, "contract")
    answer = await api.client.get(Routes.READYZ)
    assert answer.status_code == 503
    body = answer.json()
    assert body["code"] == "SCHEMA_TOO_NEW"
    assert f"version {version}" in body["message"] and "not expand-only" in body["message"]


def _migrate(url: str, *flags: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["server", "migrate", "--database", url, *flags])
    return result.exit_code, result.stdout, result.stderr


def test_migrate_says_the_database_is_newer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert _migrate(url)[0] == 0
    version = _future(url, "expand")
    code, stdout, stderr = _migrate(url, "-o", "json")
    assert code == 0, stderr
    assert json.loads(stdout) == {
        "applied": [],
        "database": url,
        "schemaVersion": version,
        "releaseSchemaVersion": _known(url),
    }
    assert f"schema is at version {version}, newer than this release's" in stderr
    _future(url, "contract", ahead=2)
    code, stdout, stderr = _migrate(url)
    assert (code, stdout) == (2, "")
    assert len(stderr.strip().splitlines()) == 1 and "not expand-only" in stderr


# Slow: `server migrate` and `server start` as real processes (4.5 s a database).
@pytest.mark.slow
def test_server_start_refuses_a_schema_past_its_window(database_url: str, tmp_path: Path) -> None:
    assert _migrate(database_url)[0] == 0
    _future(database_url, "contract")
    env = clean_env(XDG_DATA_HOME=str(tmp_path), JOBAGENTCTL_SERVER_DATABASE=database_url)
    ran = run_cli("server", "start", "--port", "0", env=env, timeout=60)
    assert ran.returncode == 2, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "newer than this release knows" in errors[0], ran.stderr
