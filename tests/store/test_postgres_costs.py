"""What lease operations cost on PostgreSQL.

- Round trips, counted from a libpq protocol trace: claim, heartbeat and the claim's holder
  completing its job are one statement each (one round trip); a status update that the
  one-statement path refuses, or one without a claim id, is one pipelined transaction (two).
  A round trip is a switch from client messages (``F``) to server messages (``B``).
- Heartbeats are HOT updates of ``job_claim`` and never touch ``job`` (from the table
  statistics, which a backend flushes at the latest when it exits).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar
from uuid import uuid4

import pytest
from psycopg.pq import Trace

from jobagentctl.errors import ValidationError
from jobagentctl.models import JobStatus
from jobagentctl.server.store import SqlStore, open_store
from jobagentctl.server.store.postgres import PostgresConnector
from tests.fixtures.databases import sql
from tests.store.conftest import opened, set_status

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("database_url", ["postgres"], indirect=True),
]

T = TypeVar("T")


async def _traced(store: SqlStore, trace: Path, operation: Awaitable[T]) -> tuple[T, int]:
    """Run ``operation`` with the protocol traced; return its result and its round trips."""
    assert isinstance(store.connector, PostgresConnector)
    pool = store.connector.pool
    assert pool is not None  # a pool of one connection: every operation runs on it
    async with pool.connection() as conn:
        pgconn = conn.pgconn
    with trace.open("w") as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            result = await operation
        finally:
            pgconn.untrace()  # flushes libpq's buffer
    sides = [line.split("\t", 1)[0] for line in trace.read_text().splitlines()]
    sides = [side for side in sides if side in ("F", "B")]
    return result, sum(1 for pair in itertools.pairwise(sides) if pair == ("F", "B"))


async def test_claim_heartbeat_complete_round_trips(database_url: str, tmp_path: Path) -> None:
    async with opened(database_url, min_size=1, max_size=1, listen=False) as store:
        ws = await store.create_workspace("w")
        agent = (await store.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        trace = tmp_path / "trace.txt"
        counts: dict[str, list[int]] = {
            "claim": [],
            "heartbeat": [],
            "complete": [],
            "repeat": [],
            "cancel": [],
        }
        # Seven rounds: psycopg prepares a statement on its fifth use; check before and after.
        for _ in range(7):
            await store.create_job(ws, agent, None, None, None)
            job, trips = await _traced(store, trace, store.claim_next(ws, agent, 30))
            assert job is not None
            counts["claim"].append(trips)
            _, trips = await _traced(store, trace, store.heartbeat(ws, job.id, job.claim_id, None))
            counts["heartbeat"].append(trips)
            done, trips = await _traced(
                store,
                trace,
                set_status(
                    store,
                    ws,
                    job.id,
                    JobStatus.SUCCESSFUL,
                    claim_id=job.claim_id,
                    metadata={"k": 1},
                ),
            )
            assert done.status == JobStatus.SUCCESSFUL
            counts["complete"].append(trips)
            # A repeat: the one statement changes nothing, the locked path answers (no-op).
            again, trips = await _traced(
                store,
                trace,
                set_status(store, ws, job.id, JobStatus.SUCCESSFUL, claim_id=job.claim_id),
            )
            assert again.status == JobStatus.SUCCESSFUL
            counts["repeat"].append(trips)
            # An operator's status change (no claim id): the locked path only.
            cancelled, trips = await _traced(
                store,
                trace,
                set_status(store, ws, job.id, JobStatus.CANCELLED),
            )
            assert cancelled.status == JobStatus.CANCELLED
            counts["cancel"].append(trips)
        # A repeat also lets go of a revoked claim of that id, if there is one (its holder's
        # command has ended): one more statement on this rare path, none on the common ones.
        expected_trips = {"claim": 1, "heartbeat": 1, "complete": 1, "repeat": 4, "cancel": 2}
        for name, expected in expected_trips.items():
            assert counts[name][0] == expected, counts
            assert counts[name][-1] == expected, counts


async def test_a_refused_status_update_leaves_the_connection_usable(database_url: str) -> None:
    async with opened(database_url, min_size=1, max_size=1, listen=False) as store:
        ws = await store.create_workspace("w")
        agent = (await store.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        job = await store.create_job(ws, agent, None, None, None)
        with pytest.raises(ValidationError):  # PostgreSQL refuses NUL in text
            await set_status(store, ws, job.id, JobStatus.FAILURE, message="a\u0000b")
        await set_status(store, ws, job.id, JobStatus.FAILURE, message="ok")
        done = await store.get_job(ws, job.id)
        assert done is not None and done.status == JobStatus.FAILURE and done.message == "ok"


async def test_heartbeats_are_hot_updates_of_job_claim_only(database_url: str) -> None:
    beats = 60
    store = open_store(database_url, min_size=1, max_size=1, listen=False)
    await store.open()
    try:
        ws = await store.create_workspace("w")
        agent = (await store.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        await store.create_job(ws, agent, None, None, None)
        job = await store.claim_next(ws, agent, 30)
        assert job is not None
        for _ in range(beats):
            await store.heartbeat(ws, job.id, job.claim_id, None)
    finally:
        await store.close()  # its backend exits and flushes the table statistics

    def counters() -> dict[str, tuple[int, int]]:
        rows = sql(
            database_url,
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE relname IN ('job', 'job_claim')",
        )
        return {name: (updated, hot) for name, updated, hot in rows}

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while counters().get("job_claim", (0, 0))[0] < beats:
        assert loop.time() < deadline, counters()
        await asyncio.sleep(0.1)
    stats = counters()
    assert stats["job_claim"] == (beats, beats), stats  # every heartbeat a HOT update
    assert stats["job"][0] == 1, stats  # only the claim itself wrote the job row
