"""What lease operations cost on PostgreSQL.

- Round trips, counted on the wire by a TCP proxy between the store and PostgreSQL
  (``tests.fixtures.wire_proxy``), whatever the driver: claim, heartbeat and the claim's holder
  completing its job are one statement each (one round trip), and so is a status update
  without a claim id on a job that no claim row holds (a V1 agent's report on its unleased
  claim, an operator's change to a finished job); a status update that the one-statement paths
  refuse (a repeat, a job with a claim row and no claim id) is one locked transaction after
  them (``LOCKED_WRITE_TRIPS``; ``LOCKED_NO_WRITE_TRIPS`` when it changes nothing). A round
  trip is a switch from the client's bytes to the server's.
- Heartbeats are HOT updates of ``job_claim`` and never touch ``job`` (from the table
  statistics, which a backend flushes at the latest when it exits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar
from uuid import uuid4

import pytest

from jobagentctl.errors import ValidationError
from jobagentctl.models import JobStatus
from jobagentctl.server.store import open_store
from tests.fixtures.databases import sql
from tests.fixtures.wire_proxy import WireProxy
from tests.integration.store.conftest import opened, set_status

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("database_url", ["postgres"], indirect=True),
]

T = TypeVar("T")

# The locked path (a status update without a claim id, or one the one-statement path refused):
# one transaction taking the claim's and the job's locks, reading, then writing what the read
# decides, or nothing (a repeat). asyncpg has no pipeline: BEGIN, both locks and the check
# between them leave as one simple-protocol query, then the read, the write, COMMIT (psycopg's
# pipeline, the driver before, sent it in two either way; one round trip per statement would
# be 6 and 5). These are the figures the test holds the connector to.
LOCKED_WRITE_TRIPS = 4
LOCKED_NO_WRITE_TRIPS = 3


async def _counted(proxy: WireProxy, operation: Awaitable[T]) -> tuple[T, int]:
    """Run ``operation``; return its result and the round trips it took on the wire."""
    proxy.reset()
    result = await operation
    return result, proxy.round_trips


async def test_claim_heartbeat_complete_round_trips(database_url: str) -> None:
    # One pooled connection and no listener: every byte through the proxy is the operation's.
    async with (
        WireProxy(database_url) as proxy,
        opened(proxy.url, min_size=1, max_size=1, listen=False) as store,
    ):
        ws = await store.entities.create_workspace("w")
        agent = (await store.entities.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        counts: dict[str, list[int]] = {
            "claim": [],
            "heartbeat": [],
            "complete": [],
            "repeat": [],
            "cancel": [],
            "cancel leased": [],
            "v1 claim": [],
            "v1 report": [],
        }
        # Seven rounds, the second and the last checked: a driver prepares a statement on some
        # use of it, psycopg on its fifth (in no extra round trip), asyncpg on its first (in
        # one more: the first round is 2 for the claim, heartbeat, completion).
        for _ in range(7):
            await store.entities.create_job(ws, agent, None, None, None)
            job, trips = await _counted(proxy, store.claim_next(ws, agent, 30))
            assert job is not None
            counts["claim"].append(trips)
            _, trips = await _counted(proxy, store.heartbeat(ws, job.id, job.claim_id, None))
            counts["heartbeat"].append(trips)
            done, trips = await _counted(
                proxy,
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
            again, trips = await _counted(
                proxy,
                set_status(store, ws, job.id, JobStatus.SUCCESSFUL, claim_id=job.claim_id),
            )
            assert again.status == JobStatus.SUCCESSFUL
            counts["repeat"].append(trips)
            # An operator's status change (no claim id) on a job no claim row holds: one
            # statement (finish_unclaimed), as the holder's own report.
            cancelled, trips = await _counted(
                proxy,
                set_status(store, ws, job.id, JobStatus.CANCELLED),
            )
            assert cancelled.status == JobStatus.CANCELLED
            counts["cancel"].append(trips)
            # An operator's cancel of a job a claim row holds: the one statement finds the
            # claim row and writes nothing, then the locked path (one round trip more than
            # before the one statement: paid only here, not by the common reports).
            await store.entities.create_job(ws, agent, None, None, None)
            leased = await store.claim_next(ws, agent, 30)
            assert leased is not None
            cancelled, trips = await _counted(
                proxy, set_status(store, ws, leased.id, JobStatus.CANCELLED)
            )
            assert cancelled.status == JobStatus.CANCELLED
            counts["cancel leased"].append(trips)
            # A V1 agent: claim by id without a lease (the agent's configured one, if any, is
            # read by the claim statement), then its report without a claim id.
            queued = await store.entities.create_job(ws, agent, None, None, None)
            v1, trips = await _counted(
                proxy, store.claim_job(ws, agent, queued.id, None, agent_lease=(1, 3600))
            )
            assert v1.claim_id is None
            counts["v1 claim"].append(trips)
            reported, trips = await _counted(
                proxy, set_status(store, ws, queued.id, JobStatus.SUCCESSFUL)
            )
            assert reported.status == JobStatus.SUCCESSFUL
            counts["v1 report"].append(trips)
        # A repeat: the one statement, then the locked path, then it also lets go of a revoked
        # claim of that id, if there is one (its holder's command has ended): one more
        # statement on this rare path, none on the common ones.
        expected_trips = {
            "claim": 1,
            "heartbeat": 1,
            "complete": 1,
            "repeat": 1 + LOCKED_NO_WRITE_TRIPS + 1,
            "cancel": 1,
            "cancel leased": 1 + LOCKED_WRITE_TRIPS,
            "v1 claim": 1,
            "v1 report": 1,
        }
        for name, expected in expected_trips.items():
            # As text: pytest would shorten the lists of every round.
            assert counts[name][1] == expected, f"{name}: {expected} expected; {counts}"
            assert counts[name][-1] == expected, f"{name}: {expected} expected; {counts}"


async def test_a_refused_status_update_leaves_the_connection_usable(database_url: str) -> None:
    async with opened(database_url, min_size=1, max_size=1, listen=False) as store:
        ws = await store.entities.create_workspace("w")
        agent = (await store.entities.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        job = await store.entities.create_job(ws, agent, None, None, None)
        with pytest.raises(ValidationError):  # PostgreSQL refuses NUL in text
            await set_status(store, ws, job.id, JobStatus.FAILURE, message="a\u0000b")
        await set_status(store, ws, job.id, JobStatus.FAILURE, message="ok")
        done = await store.entities.get_job(ws, job.id)
        assert done is not None and done.status == JobStatus.FAILURE and done.message == "ok"


async def test_heartbeats_are_hot_updates_of_job_claim_only(database_url: str) -> None:
    beats = 60
    store = open_store(database_url, min_size=1, max_size=1, listen=False)
    await store.open()
    try:
        ws = await store.entities.create_workspace("w")
        agent = (await store.entities.upsert_agent(ws, uuid4(), "a", "shell", {}, None)).id
        await store.entities.create_job(ws, agent, None, None, None)
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
