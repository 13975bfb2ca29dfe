"""The named PostgreSQL statements in the form asyncpg sends them: ``%(name)s`` parameters turned
into ``$n`` once, at load time. Ids written in as literals, for the few statements sent together by
the simple query protocol."""

from __future__ import annotations

import re
from functools import cache
from typing import Any
from uuid import UUID

from jobagentctl.server.store.connector import Params
from jobagentctl.server.store.queries import load_queries

__all__ = ["bind", "inline", "statement", "to_dollar"]

_PARAM = re.compile(r"%\(([a-z_][a-z0-9_]*)\)s|%%")


def to_dollar(sql: str) -> tuple[str, tuple[str, ...]]:
    """``%(name)s`` → ``$n`` (one number per name, casts kept), and the names in ``$n`` order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql), tuple(names)


@cache
def _converted() -> dict[str, tuple[str, tuple[str, ...]]]:
    return {name: to_dollar(sql) for name, sql in load_queries("postgres").items()}


def statement(name: str) -> str:
    """The text of statement ``name`` (for one without parameters)."""
    return _converted()[name][0]


def bind(name: str, params: Params | None) -> tuple[str, list[Any]]:
    """Statement ``name`` and its arguments in ``$n`` order, taken from ``params``."""
    sql, names = _converted()[name]
    given = params or {}
    return sql, [given[key] for key in names]


def inline(names: tuple[str, ...], params: Params) -> str:
    """Statements ``names`` as one simple-protocol query (``;``-separated), each ``%(name)s``
    written in as a literal. Only UUIDs and ints are: their text can hold no quote, so nothing taken
    from a request can end the literal. Any other value is a ``TypeError``."""

    def literal(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return "%"
        value = params[match.group(1)]
        if isinstance(value, UUID):
            return f"'{value}'::uuid"
        if isinstance(value, int) and not isinstance(value, bool):
            return str(int(value))
        raise TypeError(f"only UUIDs and ints are written into SQL, not {type(value).__name__}")

    queries = load_queries("postgres")
    return ";\n".join(_PARAM.sub(literal, queries[name]) for name in names)
