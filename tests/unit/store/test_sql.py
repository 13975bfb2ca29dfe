"""The SQL files and the pure helpers shared by both stores (no database needed)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import pytest
from asyncpg.exceptions import _base as asyncpg_base

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    ConfigError,
    Conflict,
    JobAgentError,
    NotFound,
    ServerError,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.models import JobStatus
from jobagentctl.server.store import SqlStore, open_store, queries, sqlite_path
from jobagentctl.server.store.fencing import (
    StatusContext,
    attempt_outcome_for,
    decide_status_change,
)
from jobagentctl.server.store.postgres import (
    PostgresConnector,
    _breaks_connection,
    translate_error,
)
from jobagentctl.server.store.postgres_sql import inline
from jobagentctl.server.store.postgres_url import driver_url, server_settings_of
from jobagentctl.server.store.queries import NOTIFY_CHANNEL, load_queries, migrations
from jobagentctl.server.store.rows import dump_json, merge_metadata
from jobagentctl.server.store.sqlite import SqliteConnector, _translated

# ping exists only for the PostgreSQL listener connection, the locked path's lock_claim and
# claim_appeared and the migrations' unbounded only on PostgreSQL.
SQLITE_ONLY: set[str] = set()
POSTGRES_ONLY = {"claim_appeared", "lock_claim", "ping", "unbounded"}


def test_both_dialects_name_the_same_operations() -> None:
    sqlite, postgres = set(load_queries("sqlite")), set(load_queries("postgres"))
    assert sqlite - postgres == SQLITE_ONLY
    assert postgres - sqlite == POSTGRES_ONLY
    assert all(text.strip() for text in load_queries("sqlite").values())
    assert all(text.strip() for text in load_queries("postgres").values())


def test_postgres_notifies_on_the_listened_channel() -> None:
    queries = load_queries("postgres")
    for name in ("create_job", "apply_status", "reap"):
        assert f"pg_notify('{NOTIFY_CHANNEL}'" in queries[name], name


def test_claim_next_and_reap_skip_locked_rows_on_postgres() -> None:
    queries = load_queries("postgres")
    assert "FOR UPDATE SKIP LOCKED" in queries["claim_next"]
    assert "SKIP LOCKED" in queries["reap"]
    # One statement each: no statement separator inside the block.
    for name in ("claim_job", "claim_next", "heartbeat", "reap", "apply_status"):
        code = re.sub(r"--[^\n]*", "", queries[name])
        assert ";" not in code, name


def test_migrations_are_numbered_and_agree_on_tables() -> None:
    for dialect in ("sqlite", "postgres"):
        versions = [version for version, _ in migrations(dialect)]
        assert versions == list(range(1, len(versions) + 1))
    # SQLite rebuilds a table as <name>_vN and renames it back.
    tables = {
        dialect: {
            re.sub(r"_v\d+$", "", name)
            for name in re.findall(
                r"CREATE TABLE (\w+)", "\n".join(s for _, s in migrations(dialect))
            )
        }
        for dialect in ("sqlite", "postgres")
    }
    assert (
        tables["sqlite"]
        == tables["postgres"]
        == {
            "workspace",
            "job_agent",
            "job",
            "job_claim",
            "job_attempt",
            "api_key",
            "store_probe",
            "job_log",
            "job_log_attempt",
            "job_revoked_claim",
            "job_agent_presence",
            "gateway_upstream",
            "upstream_op",
        }
    )


def test_no_index_on_claim_expiry_in_postgres() -> None:
    script = "\n".join(s for _, s in migrations("postgres"))
    assert not re.search(r"CREATE INDEX[^;]*ON job_claim", script)
    assert "fillfactor = 70" in script


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///jobagent.db", "jobagent.db"),
        ("sqlite:////var/lib/x/jobagent.db", "/var/lib/x/jobagent.db"),
        ("sqlite:///dir%20with%20space/a.db", "dir with space/a.db"),
        ("sqlite:///:memory:", ":memory:"),
    ],
)
def test_sqlite_urls(url: str, path: str) -> None:
    assert sqlite_path(url) == path
    store = open_store(url)
    assert isinstance(store, SqlStore)
    assert isinstance(store.db, SqliteConnector)
    assert store.db.path == path


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/db",
        "jobagent.db",
        "sqlite://relative.db",
        "sqlite:///",
        "",
        "postgresql://u:pw@h/db?no_such_option=1",
    ],
)
def test_unknown_database_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls(scheme: str) -> None:
    store = open_store(f"{scheme}://user:pw@host:5432/db", max_size=4)
    assert isinstance(store, SqlStore)
    assert isinstance(store.db, PostgresConnector)
    assert store.dialect == "postgres"


def test_postgres_url_options_the_driver_knows_are_taken() -> None:
    url = "postgresql://u:pw@h/db?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x"
    assert isinstance(open_store(url).db, PostgresConnector)
    with pytest.raises(ConfigError) as refused:
        open_store("postgresql://u:secret@h/db?sslmode=require&connect_timout=3")
    assert "connect_timout" in refused.value.message
    assert "secret" not in refused.value.message


def test_libpq_connect_timeout_is_taken_as_asyncpgs_timeout() -> None:
    """A URL that a psycopg release of the server ran with keeps working after the upgrade:
    libpq's connect_timeout is taken out of it and becomes asyncpg's connect timeout."""
    url = "postgresql://u:pw@h/db?sslmode=require&connect_timeout=7&application_name=x"
    given = driver_url(url)
    assert given.url == "postgresql://u:pw@h/db?sslmode=require&application_name=x"
    assert given.timeout == 7.0
    connector = open_store(url).db
    assert isinstance(connector, PostgresConnector)
    assert connector._connect == {"timeout": 7.0}
    assert driver_url("postgresql://h/db")[:2] == ("postgresql://h/db", None)
    # libpq's 0 (or less): no deadline of its own, as libpq; the server's bounds still apply.
    for none in ("0", "-1"):
        assert driver_url(f"postgresql://h/db?connect_timeout={none}")[:2] == (
            "postgresql://h/db",
            None,
        )
    with pytest.raises(ConfigError):
        driver_url("postgresql://h/db?connect_timeout=soon")


def test_libpq_options_are_mapped_ignored_or_refused() -> None:
    """A psycopg user's URL: ``options=-c k=v`` become the session's settings; keepalives,
    sslcompression, gssencmode=prefer, client_encoding=UTF8 are dropped (each said); what the
    driver cannot honour is refused by name, never echoing a value."""
    url = (
        "postgresql://u:pw@h/db?options=-c%20statement_timeout%3D1500%20-cwork_mem%3D8MB"
        "%20--lock-timeout%3D2s&keepalives=1&keepalives_idle=30&sslcompression=0"
        "&gssencmode=prefer&client_encoding=UTF8&sslmode=require"
    )
    given = driver_url(url)
    assert given.url == "postgresql://u:pw@h/db?sslmode=require"
    assert given.settings == {
        "statement_timeout": "1500",
        "work_mem": "8MB",
        "lock_timeout": "2s",
    }
    assert set(given.ignored) == {
        "keepalives",
        "keepalives_idle",
        "sslcompression",
        "gssencmode",
        "client_encoding",
    }
    assert server_settings_of(r"-c search_path=a\ b") == {"search_path": "a b"}
    for refused in (
        "gssencmode=require",
        "client_encoding=LATIN1",
        "options=-e",
        "options=-c%20secretvalue",
        "keepalive=1",
    ):
        with pytest.raises(ConfigError) as error:
            driver_url(f"postgresql://u:pw@h/db?{refused}")
        assert "secretvalue" not in error.value.message
        assert "pw" not in error.value.message.replace("password", "")


def test_only_uuids_and_ints_are_written_into_postgres_sql() -> None:
    job = uuid4()
    assert f"j.id = '{job}'::uuid FOR UPDATE" in inline(("lock_job",), {"job_id": job})
    with pytest.raises(TypeError):  # a string could end the literal
        inline(("lock_job",), {"job_id": f"{job}'; DROP TABLE job; --"})


def test_dump_json_refuses_nan_and_objects() -> None:
    assert dump_json({"a": [1, "x", None]}) == '{"a":[1,"x",null]}'
    with pytest.raises(ValidationError):
        dump_json({"a": float("nan")})
    with pytest.raises(ValidationError):
        dump_json({"a": object()})


def test_metadata_merges_key_by_key() -> None:
    assert merge_metadata('{"a": 1, "b": {"x": 1}}', {"b": {"y": 2}, "c": 3}) == {
        "a": 1,
        "b": {"y": 2},
        "c": 3,
    }
    assert merge_metadata({"a": 1}, None) == {"a": 1}


def _ctx(
    status: JobStatus,
    current: object = None,
    attempt: int | None = None,
    outcome: str | None = None,
) -> StatusContext:
    return StatusContext(status, current, attempt, outcome)  # type: ignore[arg-type]


def test_fencing_decisions() -> None:
    mine, other = uuid4(), uuid4()
    decide = decide_status_change
    done = JobStatus.SUCCESSFUL
    kw: dict[str, Any] = {"agent_scope": None, "require_claim_id": False}
    assert decide(_ctx(JobStatus.IN_PROGRESS, mine, 1), done, claim_id=mine, **kw) == "apply"
    with pytest.raises(ClaimMismatch) as mismatch:
        decide(_ctx(JobStatus.IN_PROGRESS, other, 2), done, claim_id=mine, **kw)
    assert mismatch.value.details == {"jobStatus": "inProgress", "attempt": 2}
    # Retried complete: same claim, same status → nothing to do; another status → lost.
    assert decide(_ctx(done, None, None, "completed"), done, claim_id=mine, **kw) == "noop"
    with pytest.raises(ClaimLost) as lost:
        decide(_ctx(done, None, None, "completed"), JobStatus.FAILURE, claim_id=mine, **kw)
    assert lost.value.details == {"jobStatus": "successful"}
    with pytest.raises(ClaimLost):  # reaped: the attempt ended "expired"
        decide(_ctx(JobStatus.QUEUED, None, None, "expired"), done, claim_id=mine, **kw)
    # Without a claim id (operators, V1 agents).
    assert decide(_ctx(JobStatus.IN_PROGRESS, mine, 1), done, claim_id=None, **kw) == "apply"
    assert decide(_ctx(done), done, claim_id=None, **kw) == "noop"
    # V1 parity: without a claim id a finished job takes any other status (operator requeue).
    assert decide(_ctx(done), JobStatus.QUEUED, claim_id=None, **kw) == "apply"
    assert decide(_ctx(JobStatus.CANCELLED), JobStatus.FAILURE, claim_id=None, **kw) == "apply"
    # require_claim_id binds agent keys only, and only leased jobs.
    strict: dict[str, Any] = {"claim_id": None, "require_claim_id": True}
    with pytest.raises(ValidationError):
        decide(_ctx(JobStatus.IN_PROGRESS, mine, 1), done, agent_scope=uuid4(), **strict)
    assert decide(_ctx(JobStatus.IN_PROGRESS, mine, 1), done, agent_scope=None, **strict) == "apply"
    assert decide(_ctx(JobStatus.IN_PROGRESS), done, agent_scope=uuid4(), **strict) == "apply"


def test_attempt_outcomes() -> None:
    assert attempt_outcome_for(JobStatus.SUCCESSFUL) == "completed"
    assert attempt_outcome_for(JobStatus.FAILURE) == "completed"
    assert attempt_outcome_for(JobStatus.CANCELLED) == "cancelled"
    assert attempt_outcome_for(JobStatus.QUEUED) == "released"
    assert attempt_outcome_for(JobStatus.ACTION_REQUIRED) == "released"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (asyncpg.PostgresConnectionError("connection refused to secret-host"), ServerUnavailable),
        (ConnectionRefusedError("connection refused to secret-host"), ServerUnavailable),
        (asyncpg.AdminShutdownError("terminating"), ServerUnavailable),
        (asyncpg.DeadlockDetectedError("deadlock"), ServerUnavailable),
        (asyncpg.QueryCanceledError("canceling statement due to timeout"), ServerUnavailable),
        (TimeoutError("no connection in 5 s"), ServerUnavailable),  # the pool's wait
        (asyncpg.InterfaceError("the connection is closed"), ServerUnavailable),
        (asyncpg.UndefinedTableError('relation "job" does not exist'), ServerUnavailable),
        (asyncpg.UntranslatableCharacterError("\\u0000 cannot be converted"), ValidationError),
        (asyncpg.InvalidTextRepresentationError("invalid input syntax"), ValidationError),
        (asyncpg_base.DataError("invalid input for query argument $1"), ValidationError),
        (asyncpg.UniqueViolationError("duplicate key value (prefix)=(x)"), Conflict),
        (asyncpg.ForeignKeyViolationError("Key (workspace_id)=(x) is not present"), NotFound),
        (asyncpg.PostgresSyntaxError("syntax error at or near SELECT"), ServerError),
        (asyncpg.InternalServerError("something odd"), ServerError),
        # A connection cut mid-operation leaves asyncpg's protocol in a state it refuses.
        (
            asyncpg_base.InternalClientError("cannot switch to state 15; another operation"),
            ServerUnavailable,
        ),
    ],
)
def test_postgres_errors_are_translated_without_their_text(
    error: BaseException, expected: type[JobAgentError]
) -> None:
    translated = translate_error(error)
    assert type(translated) is expected
    assert str(error) not in translated.message


@pytest.mark.parametrize(
    ("error", "broken"),
    [
        (asyncpg.AdminShutdownError("terminating connection"), True),  # pg_terminate_backend
        (asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"), True),
        (asyncpg_base.InternalClientError("cannot switch to state 15"), True),
        (ConnectionResetError("reset by peer"), True),
        (asyncpg.InterfaceError("connection is closed"), True),
        (asyncpg.QueryCanceledError("canceling statement due to statement timeout"), False),
        (asyncpg.UniqueViolationError("duplicate key"), False),
        (asyncpg.LockNotAvailableError("could not obtain lock"), False),
        (asyncpg_base.DataError("invalid input for query argument $1"), False),
    ],
)
def test_a_connection_broken_mid_operation_is_discarded(error: Exception, broken: bool) -> None:
    """Only what leaves the session unusable (or its protocol in an unknown state) costs the
    connection; a statement the server refused on a live session does not."""
    assert _breaks_connection(error) is broken


def test_a_missing_privilege_is_named() -> None:
    """Not "unexpected database error": the object the role may not use (the server's message
    names it, and no value), as 503, with where to look."""
    translated = translate_error(
        asyncpg.InsufficientPrivilegeError("permission denied for table job")
    )
    assert isinstance(translated, ServerUnavailable)
    assert "lacks a privilege: permission denied for table job" in translated.message


def test_sqlite_errors_are_translated_without_their_text() -> None:
    def fail(exc: Exception) -> object:
        def run(conn: object) -> object:
            raise exc

        return run

    cases: list[tuple[Exception, type[JobAgentError]]] = [
        (sqlite3.OperationalError("database is locked"), ServerUnavailable),
        (sqlite3.OperationalError('near "SELEC": syntax error'), ServerUnavailable),
        (sqlite3.IntegrityError("UNIQUE constraint failed: api_key.prefix"), Conflict),
        (sqlite3.IntegrityError("FOREIGN KEY constraint failed"), NotFound),
        (sqlite3.IntegrityError("NOT NULL constraint failed: job.status"), ServerError),
        (sqlite3.DatabaseError("file is not a database"), ServerError),
    ]
    for exc, expected in cases:
        with pytest.raises(expected) as caught:
            _translated(fail(exc), None)  # type: ignore[arg-type]
        assert str(exc) not in caught.value.message
        assert caught.value.__cause__ is exc
    # The project's own errors pass through untouched.
    with pytest.raises(NotFound):
        _translated(fail(NotFound("job not found")), None)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_postgres_claim_retries_once_after_a_unique_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connector = PostgresConnector("postgresql://u@h/db")
    store = SqlStore(connector)
    calls: list[str] = []

    def racing(times: int) -> object:
        async def each(query: str, limit: int, fresh: object, /, **params: object) -> object:
            calls.append(query)
            if len(calls) <= times:
                violation = asyncpg.UniqueViolationError("job_attempt_pkey")
                raise translate_error(violation) from violation
            return [{"claimed": True}]

        return each

    monkeypatch.setattr(connector, "each", racing(1))
    assert await store._claim("claim", 1) == [{"claimed": True}]
    assert len(calls) == 2
    calls.clear()
    monkeypatch.setattr(connector, "each", racing(2))  # twice in a row: give up, as a conflict
    with pytest.raises(Conflict):
        await store._claim("claim", 1)
    assert len(calls) == 2


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_both_claims_share_one_written_tail(dialect: str) -> None:
    queries = load_queries(dialect)
    assert "claim_tail" not in queries  # a fragment is not an operation
    tail = "INSERT INTO job_claim"
    by_id, nxt = queries["claim_job"], queries["claim_next"]
    assert by_id[by_id.index(tail) :] == nxt[nxt.index(tail) :]
    assert "-- include:" not in by_id and "-- include:" not in nxt


def test_an_include_of_an_unknown_fragment_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "queries.sql").write_text("-- name: a\nSELECT 1,\n-- include: nowhere\n")
    monkeypatch.setattr(queries, "_sql_dir", lambda dialect: tmp_path)
    load_queries.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="nowhere"):
            load_queries("sqlite")
    finally:
        load_queries.cache_clear()


def _load_from(monkeypatch: pytest.MonkeyPatch, directory: Path) -> dict[str, str]:
    monkeypatch.setattr(queries, "_sql_dir", lambda dialect: directory)
    load_queries.cache_clear()
    try:
        return load_queries("sqlite")
    finally:
        load_queries.cache_clear()


def test_every_sql_file_of_the_dialect_is_read_but_no_migration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "entities.sql").write_text("-- name: a\nSELECT 1\n")
    (tmp_path / "jobs.sql").write_text("-- fragment: f\n2\n-- name: b\nSELECT\n-- include: f\n")
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "0001_first.sql").write_text("-- name: c\nSELECT 3\n")
    (tmp_path / "notes.txt").write_text("-- name: d\nSELECT 4\n")
    assert _load_from(monkeypatch, tmp_path) == {"a": "SELECT 1", "b": "SELECT\n2"}


def test_a_name_defined_in_two_files_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "entities.sql").write_text("-- name: a\nSELECT 1\n")
    (tmp_path / "jobs.sql").write_text("-- name: a\nSELECT 2\n")
    with pytest.raises(RuntimeError, match=r"duplicate query name 'a' in sqlite/entities\.sql"):
        _load_from(monkeypatch, tmp_path)


def test_a_fragment_is_included_only_in_its_own_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "entities.sql").write_text("-- fragment: f\n2\n-- name: a\nSELECT 1\n")
    (tmp_path / "jobs.sql").write_text("-- name: b\nSELECT\n-- include: f\n")
    with pytest.raises(RuntimeError, match=r"sqlite/jobs\.sql: 'b' includes 'f'"):
        _load_from(monkeypatch, tmp_path)
