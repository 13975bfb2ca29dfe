"""The options of a PostgreSQL URL (``postgresql://…?sslmode=require``), checked before the
driver sees them: asyncpg would send an option it does not know to the server as a setting."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobagentctl.errors import ConfigError

__all__ = ["OPTIONS", "driver_url", "url_options"]

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


# libpq's options that the release before asyncpg (psycopg) took and that mean the same here:
# taken out of the URL and given to asyncpg as its own arguments.
TRANSLATED = frozenset({"connect_timeout"})


def driver_url(url: str) -> tuple[str, float | None]:
    """``url`` as asyncpg takes it, and libpq's ``connect_timeout`` (seconds; None when
    absent) taken out of it: a URL a psycopg release of the server ran with keeps working. A
    ``ConfigError`` as :func:`url_options` says, or for a timeout that is not a number > 0."""
    options = url_options(url)
    if "connect_timeout" not in options:
        return url, None
    try:
        timeout = float(options["connect_timeout"])
    except ValueError:
        timeout = 0.0
    if not timeout > 0:  # libpq: 0 or less waits forever; a deadline is wanted here
        raise ConfigError("connect_timeout in the PostgreSQL database URL must be seconds > 0")
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "connect_timeout"])
    return urlunsplit(parts._replace(query=query)), timeout


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
    unknown = sorted(set(options) - OPTIONS - TRANSLATED)
    if unknown:
        raise ConfigError(
            f"unknown option in the PostgreSQL database URL: {unknown[0]} "
            f"(known: {', '.join(sorted(OPTIONS | TRANSLATED))})"
        )
    return options
