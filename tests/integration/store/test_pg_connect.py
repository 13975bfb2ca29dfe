"""Connecting to PostgreSQL as an operator sets it up: a password file read as libpq reads it,
a libpq URL a psycopg release ran with, and a failure that says where and why.

A private cluster with password authentication (``scram-sha-256``) in a temp dir, on its own
port: the shared server on 5432 trusts everyone, so it can test neither passwords nor roles.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from tools.chaos.pgcluster import PgCluster

from jobagentctl.errors import ConfigError, ServerUnavailable
from jobagentctl.server.store import open_store
from jobagentctl.server.store.postgres import PostgresConnector
from jobagentctl.server.store.postgres_url import pgpass_lookup
from tests.fixtures import pgsync
from tests.fixtures.cli import clean_env, run_cli
from tests.fixtures.databases import postgres_url, private_cluster, skip_or_fail_without_postgres
from tests.fixtures.live_server import free_port

pytestmark = pytest.mark.anyio

SUPERUSER_PASSWORD = "su-pw-4b1d"  # a throw-away cluster's
# The format escapes both: written `co\:lon\\back` in the file.
ODD_PASSWORD = "co:lon\\back"
ODD_ROLE = "odd_pw_role"


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    """A private cluster asking for passwords; skipped with the reason when this machine
    cannot run one, failed instead when ``JOBAGENTCTL_REQUIRE_POSTGRES=1``."""
    pg = private_cluster(
        "no private PostgreSQL cluster with password authentication", password=SUPERUSER_PASSWORD
    )
    try:
        with pgsync.connect(pg.url) as conn:
            quoted = ODD_PASSWORD.replace("'", "''")
            conn.script(f"CREATE ROLE {ODD_ROLE} LOGIN PASSWORD '{quoted}'")
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def no_password_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No PGPASSWORD; PGPASSFILE pointing at a file of this test (not yet written)."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    passfile = tmp_path / "pgpass"
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    return passfile


def _write_passfile(path: Path, *lines: str) -> None:
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def migrated(cluster: PgCluster, anyio_backend: str) -> AsyncIterator[str]:
    """A fresh database of the cluster, migrated (the superuser's URL)."""
    name = f"t_{uuid4().hex[:10]}"
    url = cluster.create_database(name)
    store = open_store(url, min_size=1, max_size=2)
    await store.open()
    try:
        await store.migrate()
    finally:
        await store.close()
    yield url
    cluster.drop_database(name)


async def test_a_password_file_with_escaped_colon_and_backslash_connects(
    cluster: PgCluster, no_password_env: Path
) -> None:
    """The file escapes ``:`` and ``\\``; the password sent is the unescaped one (asyncpg on
    its own sent the escapes and was refused)."""
    escaped = ODD_PASSWORD.replace("\\", "\\\\").replace(":", "\\:")
    _write_passfile(
        no_password_env,
        "# the format: host:port:database:user:password",
        f"127.0.0.1:{cluster.port}:postgres:someone_else:not-this-one",
        f"127.0.0.1:{cluster.port}:*:{ODD_ROLE}:{escaped}",
    )
    store = open_store(
        f"postgresql://{ODD_ROLE}@127.0.0.1:{cluster.port}/postgres", min_size=1, max_size=2
    )
    await store.open()  # refused with the escaped text before the fix
    try:
        assert await store.readiness() is not None  # connected: it answers (not migrated)
        connector = store.db
        assert isinstance(connector, PostgresConnector)
        assert connector.pool is not None
        async with connector.pool.acquire() as conn:
            assert await conn.fetchval("SELECT current_user") == ODD_ROLE
    finally:
        await store.close()


def test_password_file_lines_are_read_as_libpq_reads_them(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    _write_passfile(
        passfile,
        "#127.0.0.1:5432:db:u:commented",
        "127.0.0.1:5432:db:other:no",
        "h\\:x:5432:db:u:host-with-colon",
        "127.0.0.1:5432:\\*:u:literal-star-db",
        "127.0.0.1:*:*:u:a\\:b\\\\c\\d:ignored-extra-field",
    )
    assert pgpass_lookup(passfile, [("127.0.0.1", 5432)], "db", "u") == "a:b\\cd"
    assert pgpass_lookup(passfile, [("h:x", 5432)], "db", "u") == "host-with-colon"
    assert pgpass_lookup(passfile, [("127.0.0.1", 5432)], "*", "u") == "literal-star-db"
    assert pgpass_lookup(passfile, [("127.0.0.1", 5432)], "db", "nobody") is None
    passfile.chmod(0o644)  # libpq ignores a file others can read
    assert pgpass_lookup(passfile, [("127.0.0.1", 5432)], "db", "u") is None


# --- why a connection failed ------------------------------------------------------------------


async def _open_error(url: str) -> str:
    store = open_store(url, min_size=1, max_size=2)
    with pytest.raises(ServerUnavailable) as failed:
        await store.open()
    await store.close()
    message = failed.value.message
    assert "\n" not in message
    return message


async def test_a_wrong_password_is_named(cluster: PgCluster, no_password_env: Path) -> None:
    message = await _open_error(
        f"postgresql://{ODD_ROLE}:guessed-pw@127.0.0.1:{cluster.port}/postgres"
    )
    assert f"127.0.0.1:{cluster.port} (database 'postgres', user '{ODD_ROLE}')" in message
    assert "wrong password" in message
    assert "guessed-pw" not in message


async def test_an_unknown_database_is_named(cluster: PgCluster) -> None:
    message = await _open_error(cluster.database_url("no_such_db"))
    assert "unknown database" in message and "no_such_db" in message
    assert SUPERUSER_PASSWORD not in message


async def test_an_unknown_role_is_named() -> None:
    # Password authentication answers "wrong password" for a role that does not exist (the
    # server does not tell); the shared server trusts, so it says the role is unknown.
    skip_or_fail_without_postgres()
    host = postgres_url().split("@", 1)[1].split("/", 1)[0]
    message = await _open_error(f"postgresql://no_such_role_x@{host}/postgres")
    assert 'role "no_such_role_x" does not exist' in message
    assert "user 'no_such_role_x'" in message


async def test_a_refused_port_is_named() -> None:
    port = free_port()
    message = await _open_error(f"postgresql://u:hidden-pw@127.0.0.1:{port}/db")
    assert f"127.0.0.1:{port} (database 'db', user 'u')" in message
    assert "connection refused" in message
    assert "hidden-pw" not in message


async def test_ssl_required_by_a_server_without_it_is_named(cluster: PgCluster) -> None:
    message = await _open_error(f"{cluster.url}?sslmode=require")  # the cluster has no TLS
    assert "SSL required by sslmode, but the server does not offer it" in message
    assert SUPERUSER_PASSWORD not in message


async def test_a_server_that_never_answers_is_a_named_timeout() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepted by the kernel, never answered
    try:
        port = silent.getsockname()[1]
        store = open_store(
            f"postgresql://u@127.0.0.1:{port}/db", min_size=1, max_size=1, statement_timeout=1.0
        )
        with pytest.raises(ServerUnavailable) as failed:
            await store.open()
        await store.close()
    finally:
        silent.close()
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in failed.value.message
    assert "(timeout)" in failed.value.message


async def test_readiness_says_why_when_the_connection_is_refused_later(
    cluster: PgCluster, migrated: str
) -> None:
    """/readyz's body: the pool's next connection is refused (the role's password changed,
    its sessions ended): the reason, not "database unreachable" alone."""
    name = migrated.rsplit("/", 1)[1]
    role = f"r_{uuid4().hex[:8]}"
    with pgsync.connect(migrated) as conn:
        conn.script(
            f"CREATE ROLE {role} LOGIN PASSWORD 'first-pw';"
            f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"
        )
    url = f"postgresql://{role}:first-pw@127.0.0.1:{cluster.port}/{name}"
    store = open_store(url, min_size=1, max_size=1)
    await store.open()
    try:
        assert await store.readiness() is None
        with pgsync.connect(cluster.url) as conn:
            conn.script(f"ALTER ROLE {role} PASSWORD 'second-pw'")
            conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
            )
        problem = await store.readiness()
        assert problem is not None
        # The terminated connection itself may answer first; the next one is refused.
        if "wrong password" not in problem.message:
            problem = await store.readiness()
        assert problem is not None
        assert "wrong password" in problem.message, problem.message
        assert f"user '{role}'" in problem.message
        assert "first-pw" not in problem.message
    finally:
        await store.close()


async def test_a_missing_privilege_is_named(cluster: PgCluster, migrated: str) -> None:
    name = migrated.rsplit("/", 1)[1]
    role = f"r_{uuid4().hex[:8]}"
    with pgsync.connect(cluster.url) as conn:
        conn.script(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")  # no GRANT
    store = open_store(
        f"postgresql://{role}:pw-{role}@127.0.0.1:{cluster.port}/{name}", min_size=1, max_size=1
    )
    await store.open()
    try:
        with pytest.raises(ServerUnavailable) as refused:
            await store.entities.get_job(uuid4(), uuid4())
        assert "lacks a privilege: permission denied for table" in refused.value.message
    finally:
        await store.close()


# Slow: the admin commands as real processes against the private cluster (8 s).
@pytest.mark.slow
def test_the_admin_commands_say_where_and_why(cluster: PgCluster, tmp_path: Path) -> None:
    """``server migrate``, ``init`` and ``start``: one line naming the place and the cause,
    exit 3, the password nowhere."""
    url = f"postgresql://{ODD_ROLE}:bad-guess-pw@127.0.0.1:{cluster.port}/postgres"
    env = clean_env(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    env["JOBAGENTCTL_SERVER_DATABASE"] = url
    env["JOBAGENTCTL_SERVER_PORT"] = str(free_port())
    env["JOBAGENTCTL_SERVER_HOST"] = "127.0.0.1"
    for command in (["server", "migrate"], ["server", "init"], ["server", "start"]):
        ran = run_cli(*command, env=env)
        assert ran.returncode == 3, (command, ran.stderr)
        lines = [line for line in ran.stderr.splitlines() if "PostgreSQL" in line]
        assert len(lines) == 1, (command, ran.stderr)
        assert f"127.0.0.1:{cluster.port}" in lines[0] and "wrong password" in lines[0]
        assert "bad-guess-pw" not in ran.stderr + ran.stdout
        assert "Traceback" not in ran.stderr


# --- a psycopg user's URL ---------------------------------------------------------------------


async def test_libpq_url_options_keep_working(
    cluster: PgCluster, caplog: pytest.LogCaptureFixture
) -> None:
    url = (
        f"{cluster.url}?options=-c%20work_mem%3D7MB%20-c%20lock_timeout%3D3s"
        "&keepalives=1&keepalives_idle=30&sslcompression=0&gssencmode=prefer&connect_timeout=0"
    )
    caplog.set_level(logging.WARNING, logger="jobagentctl.server.store.postgres")
    store = open_store(url, min_size=1, max_size=1)
    connector = store.db
    assert isinstance(connector, PostgresConnector)
    warned = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warned) == 4 and all("\n" not in line for line in warned), warned
    assert "timeout" not in connector._connect  # connect_timeout=0: no deadline of its own
    await store.open()
    try:
        assert connector.pool is not None
        async with connector.pool.acquire() as conn:
            assert await conn.fetchval("SHOW work_mem") == "7MB"
            assert await conn.fetchval("SHOW lock_timeout") == "3s"
    finally:
        await store.close()
    with pytest.raises(ConfigError, match="gssencmode"):
        open_store(f"{cluster.url}?gssencmode=require")
