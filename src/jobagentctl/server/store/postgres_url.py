"""The options of a PostgreSQL URL (``postgresql://…?sslmode=require``), checked before the driver
sees them. The driver would send an option it does not know to the server as a setting."""

from __future__ import annotations

import inspect
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from jobagentctl.errors import ConfigError

__all__ = [
    "IGNORED",
    "OPTIONS",
    "TRANSLATED",
    "DriverUrl",
    "driver_url",
    "passfile_password",
    "pgpass_lookup",
    "server_settings_of",
    "url_options",
]

log = logging.getLogger(__name__)

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


# libpq's options that the release before asyncpg (psycopg) took and that have an equivalent
# here: taken out of the URL and given to asyncpg as its own arguments (``DriverUrl``).
TRANSLATED = frozenset({"connect_timeout", "options"})

# libpq's options with nothing to do here: dropped from the URL with a warning, so that a URL
# a psycopg release ran with still starts the server. The value is why dropping is harmless.
IGNORED = {
    "keepalives": "the LISTEN connection pings the database every 30 s; the OS's TCP "
    "keepalive settings apply",
    "keepalives_idle": "the OS's TCP keepalive settings apply",
    "keepalives_interval": "the OS's TCP keepalive settings apply",
    "keepalives_count": "the OS's TCP keepalive settings apply",
    "tcp_user_timeout": "the server's --statement-timeout bounds every operation",
    "sslcompression": "PostgreSQL 14 and libpq 14 ignore it too (no compression)",
    "gssencmode": "the driver does not encrypt with GSSAPI; sslmode decides encryption",
    "client_encoding": "the driver always speaks UTF8",
    "fallback_application_name": "the server names its sessions jobagentctl",
}
# Values of an ignored option that ask for what the driver cannot give: refused, not dropped.
_REFUSED_VALUES = {"gssencmode": {"require"}}
_CLIENT_ENCODINGS = {"utf8", "utf-8", "unicode"}


class DriverUrl(NamedTuple):
    """A URL as asyncpg takes it, and what was taken out of it."""

    url: str
    # libpq's connect_timeout in seconds; None when absent or 0 (libpq: no deadline of its own).
    timeout: float | None
    # ``options=-c name=value …``: sent as the session's settings (asyncpg's server_settings).
    settings: dict[str, str]
    # Options dropped as harmless, each with why (to warn once).
    ignored: dict[str, str]


def driver_url(url: str) -> DriverUrl:
    """``url`` as asyncpg takes it, with libpq's options that have an equivalent taken out
    (``connect_timeout``; ``options=-c name=value``) and the harmless ones dropped: a URL a
    psycopg release of the server ran with keeps working.

    ``ConfigError``, as :func:`url_options` raises it, and also for:

    - a timeout that is not a number;
    - an ``options`` other than ``-c`` settings;
    - a value the driver cannot honour (``gssencmode=require``).
    """
    options = url_options(url)
    timeout: float | None = None
    if "connect_timeout" in options:
        try:
            timeout = float(options["connect_timeout"])
        except ValueError:
            raise ConfigError(
                "connect_timeout in the PostgreSQL database URL must be a number of seconds "
                "(0: no deadline of its own)"
            ) from None
        if not timeout > 0:  # libpq: 0 or less waits as long as the rest allows
            timeout = None
    settings = server_settings_of(options.get("options", ""))
    ignored: dict[str, str] = {}
    for name in sorted(set(options) & set(IGNORED)):
        value = options[name].lower()
        if value in _REFUSED_VALUES.get(name, ()) or (
            name == "client_encoding" and value not in _CLIENT_ENCODINGS
        ):
            raise ConfigError(
                f"{name}={options[name]} in the PostgreSQL database URL cannot be honoured by "
                "the driver (asyncpg); leave the option out"
            )
        ignored[name] = IGNORED[name]
    dropped = TRANSLATED | set(IGNORED)
    parts = urlsplit(url)
    if not set(options) & dropped:
        return DriverUrl(url, timeout, settings, ignored)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in dropped])
    return DriverUrl(urlunsplit(parts._replace(query=query)), timeout, settings, ignored)


def server_settings_of(options: str) -> dict[str, str]:
    """libpq's ``options`` (``-c name=value``, ``-cname=value`` or ``--name=value``, separated
    by spaces; a backslash escapes the next character) as a settings mapping. A
    ``ConfigError`` for anything else (the message never repeats a value)."""
    words: list[str] = []
    word: list[str] = []
    escaped = False
    for char in options:
        if escaped:
            word.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char.isspace():
            if word:
                words.append("".join(word))
            word = []
        else:
            word.append(char)
    if word:
        words.append("".join(word))
    settings: dict[str, str] = {}
    items = iter(words)
    for item in items:
        if item == "-c":
            pair = next(items, "")
        elif item.startswith("-c") or item.startswith("--"):
            pair = item[2:]
        else:
            pair = ""
        name, equals, value = pair.partition("=")
        if not name or not equals:
            raise ConfigError(
                "options in the PostgreSQL database URL: only '-c name=value' settings are "
                "taken (separated by spaces, %20 in a URL)"
            )
        settings[name.replace("-", "_")] = value
    return settings


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
    known = OPTIONS | TRANSLATED | set(IGNORED)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"unknown option in the PostgreSQL database URL: {unknown[0]} "
            f"(known: {', '.join(sorted(known))})"
        )
    return options


# --- the password file (PGPASSFILE, ~/.pgpass) ----------------------------------------------------
#
# asyncpg reads the file itself but keeps its escapes: a password written `a\:b` (as the format
# asks for a `:`) is sent as `a\:b`. So the file is read here as libpq reads it, and the password
# handed to asyncpg; only when nothing else gives one (the URL, PGPASSWORD, a service file).


def _pgpass_fields(line: str) -> list[tuple[str, bool]]:
    """The fields of one line, unescaped (a backslash takes the next character as it is), each
    with whether it was a bare ``*`` (a wildcard; ``\\*`` is a literal star)."""
    fields: list[tuple[str, bool]] = []
    value: list[str] = []
    raw = ""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            value.append(line[i + 1])
            raw += line[i : i + 2]
            i += 2
            continue
        if char == ":":
            fields.append(("".join(value), raw == "*"))
            value, raw = [], ""
        else:
            value.append(char)
            raw += char
        i += 1
    fields.append(("".join(value), raw == "*"))
    return fields


def pgpass_lookup(
    passfile: Path, targets: list[tuple[str, int]], database: str, user: str
) -> str | None:
    """The password of the first line of ``passfile`` matching one of ``targets`` (host, port;
    in order), ``database`` and ``user``, unescaped as libpq does; None when none matches, the
    file is missing, or it is readable by group or others (libpq then ignores it, with this
    warning)."""
    try:
        info = passfile.stat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        log.warning("password file %s is not a plain file: ignored", passfile)
        return None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("password file %s has group or world access: ignored (chmod 0600 it)", passfile)
        return None
    try:
        lines = passfile.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return None
    entries = [
        _pgpass_fields(line.rstrip("\r"))
        for line in lines
        if line.rstrip("\r") and not line.startswith("#")
    ]
    for host, port in targets:
        wanted = (host, str(port), database, user)
        for fields in entries:
            if len(fields) < 5:
                continue
            if all(
                star or value == want
                for (value, star), want in zip(fields[:4], wanted, strict=True)
            ):
                return fields[4][0]
    return None


def _resolved(url: str) -> tuple[list[tuple[str, int]], str, str] | None:
    """Where asyncpg would connect for ``url`` (hosts and ports), the database and the user.

    A unix socket is ``localhost`` there, as libpq names it in the file. None when a password is
    given otherwise (URL, PGPASSWORD, service file) or the URL cannot be read.
    """
    # asyncpg's own resolution (the URL, PG* variables, service files, default hosts), so that
    # the line matched is the one it would have matched. A private function: if it changes,
    # asyncpg's own reading applies (escapes kept), never an error of ours.
    try:
        from asyncpg import connect_utils

        parse: Any = getattr(connect_utils, "_parse_connect_dsn_and_args")  # noqa: B009
        names = inspect.signature(parse).parameters
        arguments: dict[str, Any] = dict.fromkeys(names)
        # A file that cannot exist (/dev/null/…): it answers whether a password came otherwise.
        arguments.update(dsn=url, passfile=Path(os.devnull) / "none")
        addrs, params = parse(**arguments)
    except Exception:  # any failure: asyncpg decides, as before
        return None
    if params.password is not None:
        return None
    targets = [
        ("localhost" if isinstance(addr, str) else str(addr[0]), _port(addr)) for addr in addrs
    ]
    return targets, str(params.database), str(params.user)


def _port(addr: str | tuple[str, int]) -> int:
    if isinstance(addr, str):  # /run/postgresql/.s.PGSQL.5432
        return int(addr.rpartition(".")[2] or 5432)
    return int(addr[1])


def passfile_password(url: str) -> Callable[[], str | None] | None:
    """For a URL whose password comes from the password file (``passfile`` option, PGPASSFILE, else
    ~/.pgpass). Returns a function to pass as asyncpg's ``password``. It reads the file for each new
    connection, as libpq does, so a rotated password is picked up. None when the password
    comes from elsewhere, or no line matches now (asyncpg then behaves as it would)."""
    option = url_options(url).get("passfile") or os.environ.get("PGPASSFILE")
    try:
        passfile = Path(option) if option else Path.home() / ".pgpass"
    except (RuntimeError, KeyError):  # no home directory: no file to read
        return None
    resolved = _resolved(url)
    if resolved is None:
        return None
    targets, database, user = resolved
    if pgpass_lookup(passfile, targets, database, user) is None:
        return None

    def read() -> str | None:
        return pgpass_lookup(passfile, targets, database, user)

    return read


def target_of(url: str) -> str:
    """Where ``url`` connects, for messages: hosts and ports, database and user as asyncpg
    resolves them (PG* variables and defaults included); never the password."""
    try:
        from asyncpg import connect_utils

        parse: Any = getattr(connect_utils, "_parse_connect_dsn_and_args")  # noqa: B009
        arguments: dict[str, Any] = dict.fromkeys(inspect.signature(parse).parameters)
        arguments.update(dsn=url, passfile=Path(os.devnull) / "none")
        addrs, params = parse(**arguments)
        hosts = [addr if isinstance(addr, str) else f"{addr[0]}:{addr[1]}" for addr in addrs]
        database, user = params.database, params.user
    except Exception:  # a URL asyncpg refuses: what the URL itself says
        parts = urlsplit(url)
        hosts = [parts.netloc.rpartition("@")[2] or "?"]
        database, user = parts.path.lstrip("/") or "?", parts.username or "?"
    return f"{','.join(hosts)} (database {database!r}, user {user!r})"
