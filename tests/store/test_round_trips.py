"""Round trips per lease operation on PostgreSQL, counted from a libpq protocol trace: claim
and heartbeat are one statement (one round trip), a status update one pipelined transaction
(two). A round trip is a switch from client messages (``F``) to server messages (``B``)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar
from uuid import uuid4

import pytest
from psycopg.pq import Trace

from jobagentctl.errors import ValidationError
from jobagentctl.models import JobStatus
from jobagentctl.server.store import open_store
from jobagentctl.server.store.postgres import PostgresStore

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("database_url", ["postgres"], indirect=True),
]

T = TypeVar("T")


async def _traced(store: PostgresStore, trace: Path, operation: Awaitable[T]) -> tuple[T, int]:
    """Run ``operation`` with the protocol traced; return its result and its round trips."""
    assert store._pool is not None  # a pool of one connection: every operation runs on it
    async with store._pool.connection() as conn:
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
    store = open_store(database_url, min_size=1, max_size=1, listen=False)
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        ws = await store.create_workspace("w")
        agent = (await store.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        trace = tmp_path / "trace.txt"
        counts: dict[str, list[int]] = {"claim": [], "heartbeat": [], "complete": []}
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
                store.update_status(
                    ws,
                    job.id,
                    JobStatus.SUCCESSFUL,
                    claim_id=job.claim_id,
                    message=None,
                    external_id=None,
                    metadata=None,
                ),
            )
            assert done.status == JobStatus.SUCCESSFUL
            counts["complete"].append(trips)
        for name, expected in (("claim", 1), ("heartbeat", 1), ("complete", 2)):
            assert counts[name][0] == expected, counts
            assert counts[name][-1] == expected, counts
    finally:
        await store.close()


async def test_a_refused_status_update_leaves_the_connection_usable(database_url: str) -> None:
    store = open_store(database_url, min_size=1, max_size=1, listen=False)
    await store.open()
    try:
        ws = await store.create_workspace("w")
        agent = (await store.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        job = await store.create_job(ws, agent, None, None, None)
        with pytest.raises(ValidationError):  # PostgreSQL refuses NUL in text
            await store.update_status(
                ws,
                job.id,
                JobStatus.FAILURE,
                claim_id=None,
                message="a\u0000b",
                external_id=None,
                metadata=None,
            )
        done = await store.update_status(
            ws,
            job.id,
            JobStatus.FAILURE,
            claim_id=None,
            message="ok",
            external_id=None,
            metadata=None,
        )
        assert done.status == JobStatus.FAILURE and done.message == "ok"
    finally:
        await store.close()
