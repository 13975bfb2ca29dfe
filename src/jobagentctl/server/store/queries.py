"""The SQL of each dialect, read from the package once.

The named statements come from every ``sql/<dialect>/*.sql`` file, one file per concern. The
versioned scripts come from ``sql/<dialect>/migrations/``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

__all__ = ["NOTIFY_CHANNEL", "load_queries", "migrations"]

# The PostgreSQL channel that carries "a job was queued for agent <payload>".
NOTIFY_CHANNEL = "jobagentctl_job_queued"

_NAME_LINE = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$")
_INCLUDE_LINE = re.compile(r"^\s*--\s*include:\s*([a-z_][a-z0-9_]*)\s*$")
_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def _sql_dir(dialect: str) -> Traversable:
    return files("jobagentctl.server.store").joinpath("sql", dialect)


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """The named blocks of every ``sql/<dialect>/*.sql`` file: ``-- name: x`` starts block ``x``.

    Each file holds one concern (entities, jobs, leases, logs, ...). A name is defined once
    among all of them.

    ``-- fragment: f`` starts a piece of SQL that is not a query of its own. A later line
    ``-- include: f`` of the same file is replaced by it. Fragments are defined before they
    are included.
    """
    queries: dict[str, str] = {}
    where: dict[str, str] = {}
    files = sorted(
        (entry for entry in _sql_dir(dialect).iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: entry.name,
    )
    for entry in files:
        source = f"{dialect}/{entry.name}"
        for name, text in _blocks(entry.read_text(encoding="utf-8"), source).items():
            if name in queries:
                raise RuntimeError(f"duplicate query name {name!r} in {where[name]} and {source}")
            queries[name] = text
            where[name] = source
    return queries


def _blocks(text: str, source: str) -> dict[str, str]:
    """The named blocks of one file, its fragments included."""
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    kind: str | None = None
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is not None:
            (fragments if kind == "fragment" else queries)[name] = "\n".join(lines).strip()

    for line in text.splitlines():
        match = _NAME_LINE.match(line)
        if match:
            close()
            kind, name, lines = match.group(1), match.group(2), []
            if name in queries or name in fragments:
                raise RuntimeError(f"duplicate query name {name!r} in {source}")
        elif name is not None and (include := _INCLUDE_LINE.match(line)):
            if include.group(1) not in fragments:
                raise RuntimeError(
                    f"{source}: {name!r} includes {include.group(1)!r}, "
                    "which is not a fragment defined before it in that file"
                )
            lines.append(fragments[include.group(1)])
        elif name is not None and not line.lstrip().startswith("--"):
            # Comment lines document the file; the server need not receive them every time.
            lines.append(line)
    close()
    return queries


@cache
def migrations(dialect: str) -> tuple[tuple[int, str], ...]:
    """``(version, script)`` of ``sql/<dialect>/migrations/NNNN_name.sql``, version ascending."""
    found: list[tuple[int, str]] = []
    for entry in _sql_dir(dialect).joinpath("migrations").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [version for version, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{dialect} migrations must be numbered 1..N without gaps: {versions}")
    return tuple(found)
