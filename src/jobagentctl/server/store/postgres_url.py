"""The options of a PostgreSQL URL (``postgresql://…?sslmode=require``), checked before the
driver sees them: asyncpg would send an option it does not know to the server as a setting."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from jobagentctl.errors import ConfigError

__all__ = ["OPTIONS", "url_options"]

# The query options asyncpg reads from a URL (its connect_utils), and application_name, which
# it passes on as the session's name (pg_stat_activity).
OPTIONS = frozenset(
    {
        "application_name",
        "database",
        "dbname",
        "gsslib",
        "host",
        "krbsrvname",
        "passfile",
        "password",
        "port",
        "service",
        "ssl_max_protocol_version",
        "ssl_min_protocol_version",
        "sslcert",
        "sslcrl",
        "sslkey",
        "sslmode",
        "sslnegotiation",
        "sslpassword",
        "sslrootcert",
        "target_session_attrs",
        "user",
    }
)


def url_options(url: str) -> dict[str, str]:
    """The query options of ``url``; a ``ConfigError`` for one that is not in ``OPTIONS`` or
    a URL that cannot be parsed. The message names the option, never the URL (it may hold a
    password)."""
    try:
        query = urlsplit(url).query
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError("the PostgreSQL database URL cannot be parsed") from exc
    options = dict(pairs)
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown option in the PostgreSQL database URL: {unknown[0]} "
            f"(known: {', '.join(sorted(OPTIONS))})"
        )
    return options
