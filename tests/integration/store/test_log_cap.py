"""The log cap bounds what an attempt keeps on disk, on both databases: each stored chunk counts
its row's fixed cost beside its bytes, and a request's neighbouring chunks of one stream are
stored as one chunk, so a log of tiny chunks keeps a few rows, not the cap's worth of rows."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from jobagentctl.models import LOG_CHUNK_MAX_BYTES, ClaimedJob, LogStream
from jobagentctl.server.store.logs import LOG_ROW_COST, NewChunk
from tests.fixtures.databases import sql
from tests.integration.store.conftest import Env

pytestmark = pytest.mark.anyio

OUT, ERR, MARK = LogStream.STDOUT, LogStream.STDERR, LogStream.MARKER
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def _running(env: Env) -> ClaimedJob:
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
    job = await _running(env)
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
    job = await _running(env)
    assert job.claim_id is not None
    for i in range(3 * cap // LOG_ROW_COST):
        stream = (OUT, ERR)[i % 2]
        chunk = NewChunk(stream, T0, b"x")
        await env.store.logs.append_logs(env.ws, job.id, job.claim_id, [chunk], max_bytes=cap)
    page = await env.store.logs.read_logs(env.ws, job.id, attempt=1, after=0, limit=1000)
    marker = [chunk.stream for chunk in page.chunks].index(MARK)
    assert marker == (cap // 2) // (1 + LOG_ROW_COST) + 1  # the head's rows, then the marker


async def test_a_request_stores_neighbours_of_one_stream_as_one_chunk(env: Env) -> None:
    job = await _running(env)
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
    job = await _running(env)
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
