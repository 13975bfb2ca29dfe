"""Live output under load: N running jobs heartbeating (every 5 s) into one server process on
PostgreSQL, with and without each job appending one line a second; a long-poll agent's pickup
latency alongside. Gives heartbeat p99, pickup p50, server CPU per chunk and database bytes per
chunk (the ``logs`` section of ``benchmarks.run``)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from dataclasses import dataclass, field

from benchmarks.common import Server, database, enqueue, psql
from benchmarks.httpclient import Connection

__all__ = ["LINE", "LogLoad", "log_load"]

LINE = b"2026-01-01T00:00:00Z step 17 of 40: compiling module foo/bar/baz.py ok\n"
HEARTBEAT_EVERY = 5.0
POOL = 32  # connections the simulated jobs share (one asyncio process drives them all)


@dataclass
class LogLoad:
    """One phase's figures."""

    heartbeats: list[float] = field(default_factory=list)  # latencies, seconds
    pickups: list[float] = field(default_factory=list)
    chunks: int = 0
    server_cpu: float = 0.0
    db_bytes: int = 0


async def _claim_all(server: Server, count: int) -> list[tuple[str, str]]:
    conn = await Connection.open(server.url)
    claimed: list[tuple[str, str]] = []
    try:
        while len(claimed) < count:
            status, body = await conn.request(
                "POST",
                server.path(f"/job-agents/{server.agent}/claim"),
                body={"leaseSeconds": 600, "limit": 100},
                headers=server.headers,
            )
            if status != 200:
                raise RuntimeError(f"claim: {status} {body[:200]!r}")
            claimed += [(j["id"], j["claimId"]) for j in json.loads(body)["items"]]
    finally:
        await conn.close()
    return claimed


async def _phase(
    server: Server, jobs: list[tuple[str, str]], seconds: float, logs: bool
) -> LogLoad:
    result = LogLoad()
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(POOL):
        pool.put_nowait(await Connection.open(server.url))
    end = time.monotonic() + seconds
    data = base64.b64encode(LINE).decode()

    async def send(method: str, rest: str, body: object, ok: int) -> float:
        conn = await pool.get()
        try:
            t0 = time.perf_counter()
            status, answer = await conn.request(
                method, server.path(rest), body=body, headers=server.headers
            )
            if status != ok:
                raise RuntimeError(f"{method} {rest}: {status} {answer[:200]!r}")
            return time.perf_counter() - t0
        finally:
            pool.put_nowait(conn)

    async def job(index: int, job_id: str, claim_id: str) -> None:
        await asyncio.sleep(index / len(jobs))  # spread over the first second
        beat_at = time.monotonic() + (index % 5)
        while time.monotonic() < end:
            tick = time.monotonic()
            if logs:
                body = {
                    "claimId": claim_id,
                    "chunks": [{"stream": "stdout", "at": "2026-01-01T00:00:00Z", "data": data}],
                }
                await send("POST", f"/jobs/{job_id}/logs", body, 200)
                result.chunks += 1
            if tick >= beat_at:
                beat_at += HEARTBEAT_EVERY
                result.heartbeats.append(
                    await send("POST", f"/jobs/{job_id}/heartbeat", {"claimId": claim_id}, 200)
                )
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

    async def pickups() -> None:
        agent = str(uuid.uuid4())
        await send("PUT", f"/job-agents/{agent}", {"name": "pickup", "type": "bench"}, 202)
        waiter = await Connection.open(server.url)
        try:
            while time.monotonic() < end - 2:
                poll = asyncio.ensure_future(
                    waiter.request(
                        "POST",
                        server.path(f"/job-agents/{agent}/claim"),
                        body={"leaseSeconds": 60, "waitSeconds": 30},
                        headers=server.headers,
                    )
                )
                await asyncio.sleep(0.2)
                t0 = time.perf_counter()
                await send("POST", f"/job-agents/{agent}/jobs", {}, 201)
                status, _ = await poll
                if status != 200:
                    raise RuntimeError(f"pickup claim: {status}")
                result.pickups.append(time.perf_counter() - t0)
                await asyncio.sleep(0.3)
        finally:
            await waiter.close()

    cpu0 = server.cpu()
    try:
        await asyncio.gather(pickups(), *(job(i, j, c) for i, (j, c) in enumerate(jobs)))
    finally:
        while not pool.empty():
            await pool.get_nowait().close()
    result.server_cpu = server.cpu() - cpu0
    return result


def log_load(running: int, seconds: float) -> tuple[LogLoad, LogLoad]:
    """(without logs, with logs): ``running`` claimed jobs for ``seconds`` each phase."""
    with database("postgres") as url, Server(url) as server:
        asyncio.run(enqueue(server, running))
        jobs = asyncio.run(_claim_all(server, running))
        quiet = asyncio.run(_phase(server, jobs, seconds, logs=False))
        loud = asyncio.run(_phase(server, jobs, seconds, logs=True))
        psql(url, "VACUUM ANALYZE job_log")
        size = psql(
            url,
            "SELECT pg_total_relation_size('job_log') + pg_total_relation_size('job_log_attempt')",
        )
        loud.db_bytes = int(size.strip() or 0)
    return quiet, loud
