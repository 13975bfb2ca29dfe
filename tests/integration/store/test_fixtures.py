"""The database fixtures' own rules: skip without PostgreSQL unless it is required, and URLs
that point at the per-test database."""

from __future__ import annotations

import pytest

from tests.fixtures import databases


def test_unreachable_postgres_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(databases, "_pg_problem", lambda: "OperationalError: refused")
    monkeypatch.delenv("JOBAGENTCTL_REQUIRE_POSTGRES", raising=False)
    assert databases.pg_available() is False
    with pytest.raises(pytest.skip.Exception, match=r"PostgreSQL unreachable.*refused"):
        databases.skip_or_fail_without_postgres()


def test_unreachable_postgres_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(databases, "_pg_problem", lambda: "OperationalError: refused")
    monkeypatch.setenv("JOBAGENTCTL_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception, match="JOBAGENTCTL_REQUIRE_POSTGRES=1"):
        databases.skip_or_fail_without_postgres()


def test_reachable_postgres_neither_skips_nor_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(databases, "_pg_problem", lambda: None)
    monkeypatch.setenv("JOBAGENTCTL_REQUIRE_POSTGRES", "1")
    databases.skip_or_fail_without_postgres()
    assert databases.pg_available() is True


def test_with_database_swaps_only_the_database_name() -> None:
    assert (
        databases.with_database("postgresql://u:p@h:5433/postgres?sslmode=disable", "jat_x")
        == "postgresql://u:p@h:5433/jat_x?sslmode=disable"
    )


def test_postgres_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_TEST_POSTGRES_URL", "postgresql://x@y/z")
    assert databases.postgres_url() == "postgresql://x@y/z"
    monkeypatch.delenv("JOBAGENTCTL_TEST_POSTGRES_URL")
    assert databases.postgres_url() == databases.DEFAULT_POSTGRES_URL


def test_database_url_ids(database_url: str, request: pytest.FixtureRequest) -> None:
    # Other suites select dialects by these exact ids (e.g. -k sqlite).
    dialect = request.node.callspec.id
    assert dialect in ("sqlite", "postgres")
    assert database_url.startswith("sqlite:///" if dialect == "sqlite" else "postgresql://")
