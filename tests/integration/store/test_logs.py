"""Job logs on both databases: the append's fence against the end of its attempt (an end waits
for an append in flight, an append after it is refused; a revoked claim's holder appends until it
lets go) and the cap (each chunk counts its row's cost; a request's neighbouring chunks are one)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg
import pytest

from jobagentctl.errors import ClaimLost, ClaimMismatch
from jobagentctl.models import LOG_CHUNK_MAX_BYTES, ClaimedJob, JobStatus, LogPage, LogStream
from jobagentctl.server.store import Store
from jobagentctl.server.store.logs import LOG_ROW_COST, NewChunk
from tests.fixtures.databases import sql
from tests.fixtures.waiting import await_until
from tests.integration.store.conftest import Env, set_status, stores

pytestmark = pytest.mark.anyio


# --- the fence: the end of an attempt and appends ---------------------------------------------


CAP = 1 << 20


WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


def _chunk(data: bytes, stream: LogStream = LogStream.STDOUT) -> NewChunk:
    return NewChunk(stream, datetime.now(UTC), data)


async def _append(store: Store, env: Env, job: ClaimedJob, *data: bytes) -> int:
    assert job.claim_id is not None
    result = await store.logs.append_logs(
        env.ws, job.id, job.claim_id, [_chunk(d) for d in data], max_bytes=CAP
    )
    return result.next_seq


async def _read(store: Store, env: Env, job_id: UUID, attempt: int | None = None) -> LogPage:
    return await store.logs.read_logs(env.ws, job_id, attempt=attempt, after=0, limit=1000)


def _texts(page: LogPage) -> list[bytes]:
    return [chunk.raw() for chunk in page.chunks]


async def _running(env: Env) -> ClaimedJob:
    job = await env.job()
    return await env.store.claim_job(env.ws, env.agent, job.id, 60)


@dataclass
class _Held:
    """An append held open (its task), the side connection holding it, and a watcher."""

    append: asyncio.Task[int]
    side: asyncpg.Connection
    watcher: asyncpg.Connection

    async def waiting(self) -> int:
        """How many backends wait on a lock."""
        return int(await self.watcher.fetchval(WAITING_ON_A_LOCK))


@asynccontextmanager
async def _append_held_at_the_log_row(env: Env, job: ClaimedJob) -> AsyncIterator[_Held]:
    """An append of ``last line`` that passed its fence, held open at a known point: the
    attempt's log row locked from a side connection (its transaction open until it commits)."""
    side = await asyncpg.connect(env.url)
    watcher = await asyncpg.connect(env.url)
    try:
        await side.execute("BEGIN")
        await side.execute(
            "SELECT 1 FROM job_log_attempt WHERE job_id = $1 AND attempt = 1 FOR UPDATE", job.id
        )
        held = _Held(
            asyncio.create_task(_append(env.store, env, job, b"last line\n")), side, watcher
        )
        await await_until(held.waiting, what="the append waiting on the attempt's log row")
        yield held
    finally:
        await side.close()
        await watcher.close()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_regression_the_end_of_an_attempt_waits_for_an_append_in_flight(env: Env) -> None:
    """An append that passed its fence (the claim held) is held open at a known point — the
    attempt's log row locked from a side connection — and the holder's completion is sent
    meanwhile: the completion must wait for the append's commit. Without the lock on the claim
    row it ended the attempt at once and the append committed after the end, a chunk a reader
    that saw ``ended`` never read."""
    job = await _running(env)
    assert job.claim_id is not None
    await _append(env.store, env, job, b"first\n")
    async with _append_held_at_the_log_row(env, job) as held:
        append = held.append
        assert not append.done()
        complete = asyncio.create_task(
            set_status(env.store, env.ws, job.id, JobStatus.SUCCESSFUL, claim_id=job.claim_id)
        )

        async def settled() -> bool:
            return complete.done() or await held.waiting() >= 2

        await await_until(settled, what="the completion done or waiting on a lock")
        # The append holds the claim row: the end of its attempt waits for it.
        assert not complete.done(), "the attempt ended while an accepted append was in flight"
        page = await _read(env.store, env, job.id)
        assert not page.ended
        await held.side.execute("COMMIT")
        async with asyncio.timeout(60):
            assert await append == 3
            change = await complete
    assert change.status == JobStatus.SUCCESSFUL
    page = await _read(env.store, env, job.id)
    assert page.ended and _texts(page) == [b"first\n", b"last line\n"]
    with pytest.raises(ClaimLost):  # after the end: refused, nothing written
        await _append(env.store, env, job, b"too late\n")
    assert _texts(await _read(env.store, env, job.id)) == [b"first\n", b"last line\n"]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_the_reaper_leaves_a_claim_with_an_append_in_flight_for_its_next_pass(
    env: Env,
) -> None:
    """The reaper ends expired attempts too: a claim row an append holds is skipped (its
    SKIP LOCKED), not ended under the append; the next pass ends it after the append."""
    job = await _running(env)
    await _append(env.store, env, job, b"first\n")
    async with _append_held_at_the_log_row(env, job) as held:
        append = held.append
        sql(env.url, "UPDATE job_claim SET claim_expires_at = now() - interval '1 minute'")
        assert (await env.store.reap(10, 0)).requeued == 0  # held by the append: skipped
        await held.side.execute("COMMIT")
        async with asyncio.timeout(60):
            assert await append == 3
    assert (await env.store.reap(10, 0)).requeued == 1
    page = await _read(env.store, env, job.id, 1)
    assert page.ended and page.outcome == "expired"
    assert _texts(page) == [b"first\n", b"last line\n"]


async def test_an_append_after_the_end_is_refused_and_one_before_is_in_the_log(env: Env) -> None:
    """Both orders, one after the other, on both databases: whatever comes first, the ended
    attempt's log holds exactly the appends that were acknowledged."""
    first = await _running(env)
    await _append(env.store, env, first, b"before\n")
    await env.status(first.id, JobStatus.SUCCESSFUL, claim_id=first.claim_id)
    with pytest.raises(ClaimLost):
        await _append(env.store, env, first, b"after\n")
    page = await _read(env.store, env, first.id)
    assert page.ended and _texts(page) == [b"before\n"]


async def test_raced_appends_and_completions_leave_no_chunk_after_the_end(env: Env) -> None:
    """Each trial sends an append and the holder's completion at the same moment (two
    connections), then reads the log as a follower that saw the completion would. An
    acknowledged append must be in that read: no chunk committed after the end.
    JOBAGENTCTL_LOG_RACE_TRIALS sets the number (300 for the figure in docs/reliability.md)."""
    trials = int(os.environ.get("JOBAGENTCTL_LOG_RACE_TRIALS", "30"))
    late = accepted = 0
    async with stores(env.url, 2) as (appender, completer):
        for _ in range(trials):
            job = await _running(env)
            assert job.claim_id is not None

            async def append(job: ClaimedJob = job) -> bool:
                try:
                    await _append(appender, env, job, b"racing\n")
                except (ClaimLost, ClaimMismatch):
                    return False
                return True

            async def complete(job: ClaimedJob = job) -> LogPage:
                await set_status(
                    completer, env.ws, job.id, JobStatus.SUCCESSFUL, claim_id=job.claim_id
                )
                return await _read(completer, env, job.id)

            acked, seen = await asyncio.gather(append(), complete())
            assert seen.ended
            accepted += acked
            if acked and _texts(seen) != [b"racing\n"]:
                late += 1
            final = await _read(env.store, env, job.id)
            assert _texts(final) == ([b"racing\n"] if acked else [])
    print(f"log race: {trials} trials, {accepted} appends accepted, {late} after the end")
    assert late == 0


@pytest.mark.parametrize("stop", [JobStatus.CANCELLED, JobStatus.QUEUED])
async def test_the_holder_of_a_revoked_claim_appends_until_it_lets_go(
    env: Env, stop: JobStatus
) -> None:
    """An operator cancels (or requeues) a job while its holder runs: the holder's command is
    being stopped and prints its cleanup lines; they go to its own attempt's log until the
    holder reports with its claim id. The log is not ``ended`` while it may still grow."""
    job = await _running(env)
    await _append(env.store, env, job, b"working\n")
    await env.status(job.id, stop, message="operator")  # no claim id: the claim is revoked
    page = await _read(env.store, env, job.id)
    assert not page.ended and page.outcome is not None  # the attempt ended; its log has not
    assert await _append(env.store, env, job, b"rolled back X\n") == 3
    assert await _append(env.store, env, job, b"cleanup done\n") == 4
    page = await _read(env.store, env, job.id)
    assert _texts(page) == [b"working\n", b"rolled back X\n", b"cleanup done\n"]
    assert page.attempt == 1 and not page.ended

    # The holder lets go (its final report, refused or a repeat): appends are refused since.
    if stop == JobStatus.CANCELLED:  # reports "cancelled": a repeat, answered
        await set_status(env.store, env.ws, job.id, stop, claim_id=job.claim_id)
    else:
        with pytest.raises(ClaimLost):
            await set_status(env.store, env.ws, job.id, JobStatus.FAILURE, claim_id=job.claim_id)
    with pytest.raises(ClaimLost):
        await _append(env.store, env, job, b"late\n")
    page = await _read(env.store, env, job.id)
    assert page.ended and len(page.chunks) == 3


async def test_a_revoked_claim_the_reaper_ended_or_the_operator_forced_appends_no_more(
    env: Env,
) -> None:
    reaped = await _running(env)
    await env.status(reaped.id, JobStatus.CANCELLED)
    assert await _append(env.store, env, reaped, b"stopping\n") == 2
    if env.url.startswith("sqlite:"):
        sql(env.url, "UPDATE job_revoked_claim SET claim_expires_at = claim_expires_at - 3600")
    else:
        sql(env.url, "UPDATE job_revoked_claim SET claim_expires_at = now() - interval '1 hour'")
    await env.store.reap(10, 0)
    with pytest.raises(ClaimLost):
        await _append(env.store, env, reaped, b"late\n")
    assert (await _read(env.store, env, reaped.id)).ended

    forced = await _running(env)
    await env.status(forced.id, JobStatus.QUEUED)
    await env.status(forced.id, JobStatus.CANCELLED, force=True)
    with pytest.raises(ClaimLost):
        await _append(env.store, env, forced, b"late\n")
    assert (await _read(env.store, env, forced.id)).ended


async def test_a_revoked_holder_never_writes_into_the_next_attempt(env: Env) -> None:
    """Requeued, let go, claimed again: the first holder's claim id is refused, and the new
    attempt's log holds only its own holder's output."""
    first = await _running(env)
    await env.status(first.id, JobStatus.QUEUED)
    await _append(env.store, env, first, b"first cleanup\n")
    with pytest.raises(ClaimLost):
        await set_status(env.store, env.ws, first.id, JobStatus.FAILURE, claim_id=first.claim_id)
    second = await env.store.claim_job(env.ws, env.agent, first.id, 60)
    assert second.attempt == 2
    with pytest.raises(ClaimMismatch):
        await _append(env.store, env, first, b"stale\n")
    await _append(env.store, env, second, b"second\n")
    assert _texts(await _read(env.store, env, first.id, 1)) == [b"first cleanup\n"]
    assert _texts(await _read(env.store, env, first.id, 2)) == [b"second\n"]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_regression_an_append_waiting_while_its_claim_is_revoked_is_accepted(
    env: Env,
) -> None:
    """The operator's requeue holds the claim row (waiting for the job row, locked from a side
    connection) when the holder's append arrives: the append's fence waits for the claim row,
    and the requeue then turns it into the revoked claim, after the append's snapshot. The
    append must land (the holder may still append), not be refused as a lost claim."""
    job = await _running(env)
    side = await asyncpg.connect(env.url)
    watcher = await asyncpg.connect(env.url)

    async def waiting() -> int:
        return int(await watcher.fetchval(WAITING_ON_A_LOCK))

    try:
        await side.execute("BEGIN")
        await side.execute("SELECT 1 FROM job WHERE id = $1 FOR UPDATE", job.id)
        requeue = asyncio.create_task(set_status(env.store, env.ws, job.id, JobStatus.QUEUED))
        await await_until(waiting, what="the requeue waiting for the job row")
        append = asyncio.create_task(_append(env.store, env, job, b"cleanup\n"))

        async def both_waiting() -> bool:
            return await waiting() >= 2

        await await_until(both_waiting, what="the append waiting for the claim row's lock")
        await side.execute("COMMIT")
        async with asyncio.timeout(60):
            await requeue
            assert await append == 2
    finally:
        await side.close()
        await watcher.close()
    page = await _read(env.store, env, job.id)
    assert _texts(page) == [b"cleanup\n"] and not page.ended


# --- the cap ----------------------------------------------------------------------------------


OUT, ERR, MARK = LogStream.STDOUT, LogStream.STDERR, LogStream.MARKER


T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def _running_long(env: Env) -> ClaimedJob:
    job = await env.job()
    return await env.store.claim_job(env.ws, env.agent, job.id, 600)


def _log_bytes_in_use(env: Env) -> int:
    """SQLite: the bytes of the pages that job_log and its index use (dbstat), free pages not
    counted (SQLite reuses them at once)."""
    pages = sql(
        env.url,
        "SELECT count(*) FROM dbstat WHERE name IN"
        " (SELECT name FROM sqlite_master WHERE tbl_name = 'job_log')",
    )[0][0]
    return int(pages) * int(sql(env.url, "PRAGMA page_size")[0][0])


async def test_regression_tiny_chunks_keep_rows_within_the_cap(env: Env) -> None:
    """Requests of 1,000 one-byte chunks that alternate stdout and stderr (none merged): the
    cap counts each row's cost, so the log keeps about cap / LOG_ROW_COST rows. Counting bytes
    only, it kept one row per byte of the cap (16,384 rows here; 65,345 rows, 28 MB on
    PostgreSQL, under a 64 KiB cap in the issue's trial)."""
    cap = 16 * 1024
    job = await _running_long(env)
    assert job.claim_id is not None
    for _ in range(20):
        data = os.urandom(1000)
        chunks = [NewChunk((OUT, ERR)[i % 2], T0, data[i : i + 1]) for i in range(1000)]
        result = await env.store.logs.append_logs(
            env.ws, job.id, job.claim_id, chunks, max_bytes=cap
        )
    assert result.truncated and result.next_seq == 20 * 1000 + 1
    rows, data_bytes = sql(env.url, "SELECT count(*), sum(length(data)) FROM job_log")[0]
    assert rows <= cap // LOG_ROW_COST + 1, rows  # the marker is a row of its own
    assert data_bytes + rows * LOG_ROW_COST <= cap + 200  # the marker's text is not counted
    if env.url.startswith("sqlite:"):
        assert _log_bytes_in_use(env) <= 4 * cap
    page = await env.store.logs.read_logs(env.ws, job.id, attempt=1, after=0, limit=1000)
    streams = [chunk.stream for chunk in page.chunks]
    assert streams.count(MARK) == 1 and page.chunks[-1].seq == 20 * 1000


async def test_the_head_is_measured_with_the_rows_cost(env: Env) -> None:
    """The head (never cut) is the chunks whose cost from the log's start is under half the
    cap: with one-byte chunks, about cap / 2 / LOG_ROW_COST rows, not cap / 2 of them."""
    cap = 16 * 1024
    job = await _running_long(env)
    assert job.claim_id is not None
    for i in range(3 * cap // LOG_ROW_COST):
        stream = (OUT, ERR)[i % 2]
        chunk = NewChunk(stream, T0, b"x")
        await env.store.logs.append_logs(env.ws, job.id, job.claim_id, [chunk], max_bytes=cap)
    page = await env.store.logs.read_logs(env.ws, job.id, attempt=1, after=0, limit=1000)
    marker = [chunk.stream for chunk in page.chunks].index(MARK)
    assert marker == (cap // 2) // (1 + LOG_ROW_COST) + 1  # the head's rows, then the marker


async def test_a_request_stores_neighbours_of_one_stream_as_one_chunk(env: Env) -> None:
    job = await _running_long(env)
    assert job.claim_id is not None
    later = T0 + timedelta(seconds=1)
    big = b"b" * (LOG_CHUNK_MAX_BYTES - 10)
    chunks = [
        *(NewChunk(OUT, T0 if i == 0 else later, b"%d\n" % i) for i in range(1000)),
        NewChunk(MARK, later, b"[jobagentctl: 5 bytes dropped: test]\n"),
        NewChunk(MARK, later, b"[jobagentctl: 6 bytes dropped: test]\n"),
        NewChunk(ERR, later, b"e1"),
        NewChunk(ERR, later, b"e2"),
        NewChunk(OUT, later, big),
        NewChunk(OUT, later, b"0123456789A"),  # would pass 64 KiB merged: a chunk of its own
    ]
    result = await env.store.logs.append_logs(
        env.ws, job.id, job.claim_id, chunks, max_bytes=1 << 20
    )
    assert result.next_seq == 7
    page = await env.store.logs.read_logs(env.ws, job.id, attempt=1, after=0, limit=1000)
    got = [(c.seq, c.offset, c.stream, c.raw()) for c in page.chunks]
    lines = b"".join(b"%d\n" % i for i in range(1000))
    m1, m2 = chunks[1000].data, chunks[1001].data
    offsets = [0, len(lines), len(lines) + len(m1), len(lines) + len(m1) + len(m2)]
    offsets += [offsets[-1] + 4, offsets[-1] + 4 + len(big)]
    assert got == [
        (1, offsets[0], OUT, lines),
        (2, offsets[1], MARK, m1),
        (3, offsets[2], MARK, m2),
        (4, offsets[3], ERR, b"e1e2"),
        (5, offsets[4], OUT, big),
        (6, offsets[5], OUT, b"0123456789A"),
    ]
    assert page.chunks[0].at == T0  # a merged chunk has the time of its first
    assert result.stored_bytes == sum(len(c.data) for c in chunks)


async def test_rows_a_previous_release_did_not_count_are_counted_at_the_next_cut(
    env: Env,
) -> None:
    """A release without ``stored_rows`` (a rolling upgrade) appends without counting its rows:
    the next cut counts the rows there are, cuts by them, and writes the count back."""
    cap = 16 * 1024
    job = await _running_long(env)
    assert job.claim_id is not None

    async def append(count: int, max_bytes: int) -> None:
        assert job.claim_id is not None
        chunks = [NewChunk((OUT, ERR)[i % 2], T0, b"x") for i in range(count)]
        await env.store.logs.append_logs(env.ws, job.id, job.claim_id, chunks, max_bytes=max_bytes)

    await append(500, 1 << 20)
    sql(env.url, "UPDATE job_log_attempt SET stored_rows = 0")  # as the old release leaves it
    await append(100, cap)  # 100 counted rows: over the cap, so cut by all 600
    rows = sql(env.url, "SELECT count(*) FROM job_log")[0][0]
    assert rows <= cap // LOG_ROW_COST + 1
    assert sql(env.url, "SELECT stored_rows FROM job_log_attempt") == [(rows,)]
