"""Raw access to the lease tables for the property model: one persistent connection per test.

Reads every row the model checks after each step, and makes a claim lapse at once by moving its
``claim_expires_at`` into the past (the database clock cannot move; this is the tests-only way).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from jobagentctl.server.store import sqlite_path
from tests.fixtures import pgsync

__all__ = ["Raw", "Snapshot"]

# "Now" as each dialect stores lease times: SQLite keeps REAL epoch seconds, PostgreSQL
# timestamptz. Both read the database clock, as the store does.
_SQLITE_NOW = "(julianday('now') - 2440587.5) * 86400.0"


@dataclass(frozen=True)
class Snapshot:
    """Every row of the three lease tables, all columns, ids as text: equal ⇔ nothing changed."""

    jobs: tuple[tuple[Any, ...], ...]
    claims: tuple[tuple[Any, ...], ...]
    attempts: tuple[tuple[Any, ...], ...]


class Raw:
    """A dialect-aware side connection (autocommit) next to the store under test."""

    def __init__(self, database_url: str) -> None:
        self.sqlite = database_url.startswith("sqlite:")
        self._sqlite: sqlite3.Connection | None = None
        self._pg: pgsync.SyncConnection | None = None
        if self.sqlite:
            self._sqlite = sqlite3.connect(
                sqlite_path(database_url), timeout=30, isolation_level=None
            )
        else:
            self._pg = pgsync.connect(database_url)

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()

    def rows(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; ``?`` placeholders (numbered ``$1``… on PostgreSQL)."""
        if self._sqlite is not None:
            return self._sqlite.execute(statement, params).fetchall()
        assert self._pg is not None
        return self._pg.fetch(pgsync.dollar_placeholders(statement, "?"), *params)

    @property
    def now(self) -> str:
        return _SQLITE_NOW if self.sqlite else "now()"

    def clear_jobs(self) -> None:
        """Forget the jobs of the previous example (agents and workspaces stay)."""
        for table in ("job_revoked_claim", "job_claim", "job_attempt", "job"):
            self.rows(f"DELETE FROM {table}")

    def expire(self, job_id: UUID) -> int:
        """Move this claim's expiry one minute into the past; returns the rows touched."""
        minus_a_minute = f"{self.now} - 60" if self.sqlite else "now() - interval '1 minute'"
        statement = f"UPDATE job_claim SET claim_expires_at = {minus_a_minute} WHERE job_id = ?"
        if self._sqlite is not None:
            return self._sqlite.execute(statement, (str(job_id),)).rowcount
        assert self._pg is not None
        return self._pg.execute(pgsync.dollar_placeholders(statement, "?"), job_id)

    def snapshot(self) -> Snapshot:
        def text(rows: list[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
            return tuple(tuple(str(v) if isinstance(v, UUID) else v for v in row) for row in rows)

        return Snapshot(
            jobs=text(self.rows("SELECT * FROM job ORDER BY id")),
            claims=text(self.rows("SELECT * FROM job_claim ORDER BY job_id")),
            attempts=text(self.rows("SELECT * FROM job_attempt ORDER BY job_id, attempt")),
        )

    def jobs(self) -> dict[str, tuple[str, str | None, bool, bool]]:
        """``id → (status, message, completed_at set, started_at set)``."""
        rows = self.rows(
            "SELECT id, status, message, completed_at IS NOT NULL, started_at IS NOT NULL FROM job"
        )
        return {str(r[0]): (r[1], r[2], bool(r[3]), bool(r[4])) for r in rows}

    def claims(self) -> list[tuple[str, str, int, int, bool]]:
        """``(job_id, claim_id, attempt, lease_seconds, expired by the database clock)``."""
        rows = self.rows(
            "SELECT job_id, claim_id, attempt, lease_seconds,"
            f" claim_expires_at < {self.now} FROM job_claim"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), int(r[3]), bool(r[4])) for r in rows]

    def revoked(self) -> dict[str, str]:
        """``job_id → claim_id`` of the revoked claims still held."""
        rows = self.rows("SELECT job_id, claim_id FROM job_revoked_claim")
        return {str(r[0]): str(r[1]) for r in rows}

    def attempts(self) -> list[tuple[str, int, str | None, str | None, bool]]:
        """``(job_id, attempt, claim_id, outcome, ended_at set)`` by job then attempt."""
        rows = self.rows(
            "SELECT job_id, attempt, claim_id, outcome, ended_at IS NOT NULL FROM job_attempt"
            " ORDER BY job_id, attempt"
        )
        return [
            (str(r[0]), int(r[1]), None if r[2] is None else str(r[2]), r[3], bool(r[4]))
            for r in rows
        ]
