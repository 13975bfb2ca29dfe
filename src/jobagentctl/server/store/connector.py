"""The ``Connector`` protocol: how ``SqlStore`` talks to one database (``sqlite.py``,
``postgres.py``).

Queries are named (``sql/<dialect>/*.sql``) and take keyword parameters. Rows are mappings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol
from uuid import UUID

from jobagentctl.server.store.rows import Row
from jobagentctl.server.store.waiters import Waiters

__all__ = ["Connector", "Decide", "Params", "Row"]

Params = dict[str, Any]
# set_status's decision under the job's lock: the row read → the write to run, or None.
Decide = Callable[[Row | None], tuple[str, Params] | None]


class Connector(Protocol):
    """One database behind the store: it runs the dialect's statement of a name and translates
    the driver's errors into the project's, once."""

    # The dialect's name: its SQL directory (sql/<dialect>/), and what the server reports.
    dialect: str
    # True when a statement can merge a JSON object into a column key by key (PostgreSQL's
    # jsonb ||); else the store merges it in Python from the row read under the job's lock.
    merges_json: bool
    waiters: Waiters

    async def open(self) -> None:
        """Connect (a pool or a connection) and start waking long-polls; does not migrate."""

    async def close(self) -> None:
        """Disconnect and stop the background tasks; idempotent."""

    async def migrate(self) -> list[int]:
        """Apply pending migrations in one transaction, serialised between processes."""

    async def one(self, query: str, /, **params: Any) -> Row | None:
        """The first row of ``query`` (every row is read: the statement is finished)."""

    async def all(self, query: str, /, **params: Any) -> list[Row]:
        """Every row of ``query``."""

    async def each(
        self, query: str, limit: int, fresh: Callable[[], Params], /, **params: Any
    ) -> list[Row]:
        """Up to ``limit`` rows of the claim-like ``query``, each job claimed once.

        PostgreSQL runs one statement with ``limit`` bound. SQLite runs the chain again in one
        transaction, ``fresh()`` over ``params`` each time, until it answers none.
        """

    async def locked(self, read: str, decide: Decide, /, **params: Any) -> Row | None:
        """One transaction holding the job's lock (``lock_job``). Run ``read`` and pass its row to
        ``decide``, which may raise: nothing is written then. Run the write it names. Return the
        write's row, or the read's row when ``decide`` wrote nothing."""

    async def writable(self) -> bool:
        """False while the last write failed for a reason that fails every write (SQLite: disk
        full, I/O error, read-only file)."""

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """``jobs`` jobs were queued for ``agent_id`` by a statement of this process."""
