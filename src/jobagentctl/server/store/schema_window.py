"""The schema range a release runs on. Each migration's compat header (``-- compat: expand`` or
``contract``, its first line), and the check of a database newer than this release knows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from jobagentctl.errors import SchemaTooNew

__all__ = ["FIRST_HEADED_MIGRATION", "Compat", "SchemaWindow", "compat_of"]

# Migrations from this version on must declare their compat header (the first five predate it).
FIRST_HEADED_MIGRATION = 6

_HEADER_PREFIX = "-- compat:"


class Compat(StrEnum):
    """What a migration leaves for the release before it:

    - ``expand``: that release still runs on the schema. New tables, nullable or defaulted columns,
      indexes, triggers.
    - ``contract``: it does not. A column dropped, renamed or made stricter.
    """

    EXPAND = "expand"
    CONTRACT = "contract"


def compat_of(script: str) -> Compat | None:
    """The compat header of a migration script (its first line), or None without a valid one."""
    first = script.split("\n", 1)[0].strip()
    if not first.startswith(_HEADER_PREFIX):
        return None
    try:
        return Compat(first.removeprefix(_HEADER_PREFIX).strip())
    except ValueError:
        return None


def _recorded(value: object) -> Compat | None:
    """The compat recorded in ``schema_migrations`` (None: none, or a word this release does
    not know, which it cannot assume to be harmless)."""
    try:
        return Compat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _span(versions: list[int]) -> str:
    return str(versions[0]) if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"


@dataclass(frozen=True, slots=True)
class SchemaWindow:
    """A database's schema as one release sees it:

    - ``known``: the release's newest migration.
    - ``newest``: the database's newest applied version (0: none).
    - ``newer``: each applied version above ``known``, with the compat header it was applied with
      (None: not recorded).
    """

    known: int
    newest: int
    newer: tuple[tuple[int, Compat | None], ...]

    @classmethod
    def of(cls, applied: Iterable[Mapping[str, Any]], known: int) -> SchemaWindow:
        """The window from ``applied_versions`` rows (``version``, ``compat``)."""
        rows = sorted((int(row["version"]), _recorded(row["compat"])) for row in applied)
        return cls(
            known=known,
            newest=rows[-1][0] if rows else 0,
            newer=tuple((version, compat) for version, compat in rows if version > known),
        )

    @property
    def blocking(self) -> list[int]:
        """The newer versions this release cannot run on: any but ``expand``."""
        return [version for version, compat in self.newer if compat is not Compat.EXPAND]

    def note(self) -> str | None:
        """One line for an operator when the database is newer than this release but within
        its window; None when it is not newer."""
        if not self.newer or self.blocking:
            return None
        versions = [version for version, _ in self.newer]
        return (
            f"the database schema is at version {self.newest}, newer than this release's "
            f"{self.known}; version {_span(versions)} only expands it, so this release runs on it"
        )

    def problem(self) -> SchemaTooNew | None:
        """The error a server of this release refuses the database with, or None."""
        blocking = self.blocking
        if not blocking:
            return None
        return SchemaTooNew(
            f"the database schema is at version {self.newest}, newer than this release knows "
            f"({self.known}), and version {', '.join(map(str, blocking))} is not expand-only: "
            "run a release that knows it, or restore the backup taken before that upgrade",
            details={
                "schemaVersion": self.newest,
                "releaseSchemaVersion": self.known,
                "incompatibleVersions": blocking,
            },
        )

    def check(self) -> None:
        """Raise :meth:`problem` if there is one."""
        problem = self.problem()
        if problem is not None:
            raise problem
