"""Storage: ``Store`` (``SqlStore``, every operation written once with its contract) over a
SQLite or a PostgreSQL connector. ``open_store(url)`` picks the connector from the URL's
scheme; drivers load only then.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from jobagentctl.errors import ConfigError
from jobagentctl.server.store.records import (
    ApiKeyRecord,
    OutageGrace,
    ReapResult,
    StatusChange,
    WorkspaceRecord,
)
from jobagentctl.server.store.sql_store import SqlStore, Store

__all__ = [
    "ApiKeyRecord",
    "OutageGrace",
    "ReapResult",
    "SqlStore",
    "StatusChange",
    "Store",
    "WorkspaceRecord",
    "open_store",
    "sqlite_path",
]

_SQLITE_PREFIX = "sqlite:///"


def sqlite_path(database_url: str) -> str:
    """The file of a ``sqlite:///path`` URL (SQLAlchemy's convention: three slashes then a
    relative path, four for an absolute one; ``sqlite:///:memory:`` for a private database)."""
    if not database_url.startswith(_SQLITE_PREFIX):
        raise ConfigError("a SQLite database URL looks like sqlite:///path/to/file.db")
    path = unquote(database_url[len(_SQLITE_PREFIX) :].split("?", 1)[0])
    if not path:
        raise ConfigError("the SQLite database URL names no file: sqlite:///path/to/file.db")
    return path


def open_store(database_url: str, **options: Any) -> SqlStore:
    """A store for ``database_url`` (not yet opened: ``await store.open()``, then
    ``await store.migrate()`` where wanted).

    ``sqlite:///path`` → SQLite (options: ``busy_timeout_ms``, ``poll_interval``,
    ``statement_timeout``: seconds, default None = unbounded);
    ``postgresql://…`` / ``postgres://…`` → PostgreSQL (options: ``min_size``, ``max_size``,
    ``pool_timeout``, ``poll_interval``, ``listen``, ``statement_timeout``: seconds, default 5,
    None = unbounded; past it an operation is ``ServerUnavailable`` at once). Any other scheme
    is a ``ConfigError``.
    """
    scheme = urlsplit(database_url).scheme.lower()
    if scheme == "sqlite":
        from jobagentctl.server.store.sqlite import SqliteConnector

        return SqlStore(SqliteConnector(sqlite_path(database_url), **options))
    if scheme in ("postgresql", "postgres"):
        from jobagentctl.server.store.postgres import PostgresConnector

        return SqlStore(PostgresConnector(database_url, **options))
    shown = f"{scheme}://…" if scheme else "a URL without a scheme"
    raise ConfigError(
        f"unsupported database URL ({shown}): use sqlite:///path or postgresql://user@host/db"
    )
