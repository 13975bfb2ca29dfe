"""Bytes on disk per attempt against the log cap: one attempt appended through the store, in
requests of many chunks, until it has appended several times the cap; then its rows, the
bytes of output it keeps, and what the log table takes on disk.

On disk: PostgreSQL ``pg_total_relation_size('job_log')`` (heap, TOAST, index) as the run left
it — the rows cut are dead tuples there until (auto)vacuum makes their space reusable — and
the bytes of its live and dead rows (``pgstattuple``); SQLite the pages of ``job_log`` and
its index in use (``dbstat``; freed pages go to the file's free list and are reused at once),
and the database file and its WAL. Each pattern runs on a database of its own; the data is
random (PostgreSQL would compress a repeated byte to nothing).

    python -m benchmarks.logcap [--cap 65536] [--scale 1.0] [--sqlite] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import uuid4

from jobagentctl.models import LogStream
from jobagentctl.server.store import open_store, sqlite_path
from jobagentctl.server.store.logs import NewChunk

__all__ = ["PATTERNS", "Pattern", "Stored", "measure"]


@dataclass(frozen=True)
class Pattern:
    """``requests`` appends of ``per_request`` chunks of ``size`` bytes; ``alternate``: the
    chunks alternate stdout and stderr (no two neighbours of one stream: none merged)."""

    name: str
    size: int
    per_request: int
    requests: int
    alternate: bool = False


@dataclass
class Stored:
    rows: int
    kept: int  # bytes of output kept (markers not counted)
    on_disk: int
    live: int | None  # PostgreSQL only: the live rows' bytes (heap and TOAST)
    files: int | None = None  # SQLite only: the database file and its WAL, every table
    dead: int | None = None  # PostgreSQL only: the dead rows' bytes, until (auto)vacuum


PATTERNS = (
    # The issue's: 200 requests of 1,000 one-byte chunks.
    Pattern("1-byte, one stream", 1, 1000, 200),
    Pattern("1-byte, alternating", 1, 1000, 200, alternate=True),
    Pattern("100-byte, one stream", 100, 1000, 20),
    Pattern("100-byte, alternating", 100, 1000, 20, alternate=True),
    Pattern("64 KiB", 64 * 1024, 1, 32),
)


def _requests(pattern: Pattern, scale: float) -> Iterator[list[NewChunk]]:
    streams = (LogStream.STDOUT, LogStream.STDERR)
    size = pattern.size
    for _ in range(max(1, round(pattern.requests * scale))):
        at = datetime.now(UTC)
        # Random bytes throughout: PostgreSQL compresses whatever repeats.
        data = os.urandom(size * pattern.per_request)
        yield [
            NewChunk(
                streams[i % 2] if pattern.alternate else LogStream.STDOUT,
                at,
                data[i * size : (i + 1) * size],
            )
            for i in range(pattern.per_request)
        ]


async def measure(url: str, pattern: Pattern, cap: int, scale: float = 1.0) -> Stored:
    """Run ``pattern`` against a fresh, migrated database at ``url``."""
    store = open_store(url)
    await store.open()
    try:
        await store.migrate()
        ws = await store.entities.create_workspace("logcap")
        agent = await store.entities.upsert_agent(ws, uuid4(), "agent", "shell", {}, None)
        job = await store.entities.create_job(ws, agent.id, None, None, None)
        claimed = await store.claim_job(ws, agent.id, job.id, 600)
        assert claimed.claim_id is not None
        for chunks in _requests(pattern, scale):
            await store.logs.append_logs(ws, job.id, claimed.claim_id, chunks, max_bytes=cap)
    finally:
        await store.close()
    return _stored(url)


def _stored(url: str) -> Stored:
    if url.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(sqlite_path(url))
        try:
            rows, kept = conn.execute(
                "SELECT count(*), COALESCE(sum(length(data)) FILTER (WHERE stream <> 'marker'), 0)"
                " FROM job_log"
            ).fetchone()
            (pages,) = conn.execute(
                "SELECT count(*) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master"
                " WHERE tbl_name = 'job_log')"
            ).fetchone()
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        finally:
            conn.close()
        path = sqlite_path(url)
        files = sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))
        return Stored(int(rows), int(kept), int(pages) * int(page_size), None, files)
    from benchmarks.common import psql

    counted = psql(
        url,
        "SELECT count(*) || ' ' || COALESCE(sum(octet_length(data))"
        " FILTER (WHERE stream <> 'marker'), 0) FROM job_log",
    )
    rows, kept = (int(x) for x in counted.split())
    size = int(psql(url, "SELECT pg_total_relation_size('job_log')"))
    print(
        "  heap, TOAST, indexes:",
        psql(
            url,
            "SELECT pg_relation_size('job_log') || ' ' || pg_relation_size(reltoastrelid)"
            " || ' ' || pg_indexes_size('job_log') FROM pg_class WHERE relname = 'job_log'",
        ),
    )
    # The rows' own bytes (heap and TOAST), live and dead, as pgstattuple reads them: a plain
    # or FULL vacuum on this shared server may keep dead rows that another database's open
    # transaction could still see, so the split is read rather than vacuumed away.
    psql(url, "CREATE EXTENSION IF NOT EXISTS pgstattuple")
    split = psql(
        url,
        "SELECT sum(t.tuple_len) || ' ' || sum(t.dead_tuple_len) FROM pg_class AS c,"
        " LATERAL (SELECT c.oid UNION ALL SELECT c.reltoastrelid) AS r(oid),"
        " LATERAL pgstattuple(r.oid) AS t WHERE c.relname = 'job_log'",
    )
    live, dead = (int(x) for x in split.split())
    return Stored(rows, kept, size, live, dead=dead)


def main() -> None:
    from benchmarks.common import database

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=65536)
    parser.add_argument("--scale", type=float, default=1.0, help="times the requests")
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    kinds = [k for k in ("sqlite", "postgres") if getattr(args, k)] or ["sqlite", "postgres"]
    print(f"cap {args.cap} bytes")
    for kind in kinds:
        for pattern in PATTERNS:
            with database(kind) as url:
                got = asyncio.run(measure(url, pattern, args.cap, args.scale))
            requests = max(1, round(pattern.requests * args.scale))
            appended = pattern.size * pattern.per_request * requests
            vacuumed = (
                f" (file+WAL {got.files:,})"
                if got.live is None
                else f" (live rows {got.live:,}, dead {got.dead:,})"
            )
            print(
                f"{kind:8} {pattern.name:22} appended {appended:>11,}  rows {got.rows:>6,}  "
                f"kept {got.kept:>7,}  on disk {got.on_disk:>10,}{vacuumed}  "
                f"= {got.on_disk / args.cap:.2f}x the cap"
            )


if __name__ == "__main__":
    main()
