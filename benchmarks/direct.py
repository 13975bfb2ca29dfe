"""The database's ceiling for this design: the store's own statements, issued in-process.

"Direct" runs exactly the SQL the server runs (the store's named queries through its own
PostgreSQL driver or sqlite3) at the same concurrency, with no HTTP, no framework and no auth in
between, so the ratio API / direct is what the server layer costs. The store's thin row → model
conversion is included in both paths.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass

from benchmarks.common import (
    PostgresCpu,
    Server,
    database,
    enqueue,
    psql,
    self_cpu_seconds,
)
from benchmarks.httpclient import Connection
from jobagentctl.models import ClaimedJob, JobStatus
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store, open_store

# The server's reaper batch: a benchmarked pass is the pass a server runs by default.
REAP_BATCH = int(ServerSettings.model_fields["reap_batch_size"].default)


@dataclass
class DirectResult:
    cycles: int
    seconds: float
    client_cpu: float
    db_cpu: float
    hot_share: float = 0.0

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0


async def setup_store(store: Store, jobs: int) -> tuple[uuid.UUID, uuid.UUID]:
    """Open and migrate ``store``, create a workspace and an agent, queue ``jobs`` jobs; the
    workspace and agent ids (shared by every benchmark that works on a store directly)."""
    await store.open()
    await store.migrate()
    ws = await store.entities.create_workspace("bench")
    agent = uuid.uuid4()
    await store.entities.upsert_agent(ws, agent, "bench", "bench", {}, None)
    for _ in range(jobs):
        await store.entities.create_job(ws, agent, {}, None, None)
    return ws, agent


async def complete(store: Store, ws: uuid.UUID, job: ClaimedJob) -> None:
    """Report ``job`` successful under its claim, as an agent does (the store's own call)."""
    await store.set_status(
        ws,
        job.id,
        JobStatus.SUCCESSFUL,
        claim_id=job.claim_id,
        message=None,
        external_id=None,
        metadata=None,
    )


async def agent_loop(store: Store, ws: uuid.UUID, agent: uuid.UUID) -> int:
    """One agent: claim and complete jobs until none is queued; how many it did."""
    done = 0
    while (job := await store.claim_next(ws, agent, 60)) is not None:
        await complete(store, ws, job)
        done += 1
    return done


async def prepare_reap(store: Store, url: str, claims: int, expired: int) -> None:
    """A store with ``claims`` running claims, ``expired`` of them expired, analysed, and its
    connection and plan cache warmed on an empty reaper pass."""
    _, agent = await setup_store(store, 0)
    await store.reap(REAP_BATCH, 0)
    # Benchmark set-up only: bulk rows through psql (the values are ours, not user input).
    job_id = job_id_sql("now()")
    psql(url, FILL_CLAIMS.format(claims=claims, expired=expired, agent=agent, job_id=job_id))
    for table in ("job_claim", "job", "job_attempt"):
        psql(url, f"VACUUM ANALYZE {table}")


async def _cycles(url: str, concurrency: int, jobs: int, kind: str) -> DirectResult:
    options = {"max_size": max(4, concurrency + 2)} if kind == "postgres" else {}
    store = open_store(url, **options)
    ws, agent = await setup_store(store, jobs)
    try:
        cpu0, pg = self_cpu_seconds(), PostgresCpu()
        t0 = time.perf_counter()
        loops = [agent_loop(store, ws, agent) for _ in range(concurrency)]
        done = sum(await asyncio.gather(*loops))
        elapsed = time.perf_counter() - t0
        return DirectResult(
            done,
            elapsed,
            self_cpu_seconds() - cpu0,
            pg.seconds() if kind == "postgres" else 0.0,
        )
    finally:
        await store.close()


def cycles(kind: str, concurrency: int, jobs: int) -> DirectResult:
    with database(kind) as url:
        return asyncio.run(_cycles(url, concurrency, jobs, kind))


# --- heartbeats ----------------------------------------------------------------------------------


def _hot(url: str) -> tuple[int, int]:
    # Statistics reach pg_stat_user_tables once the writing backends flush them (≤ 1 s idle).
    row = psql(
        url,
        "SELECT n_tup_upd || ',' || n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE relname = 'job_claim'",
    )
    upd, hot = (int(x) for x in row.split(","))
    return upd, hot


def _hot_share(url: str, before: tuple[int, int]) -> float:
    time.sleep(1.5)
    after = _hot(url)
    upd = after[0] - before[0]
    return (after[1] - before[1]) / upd if upd else 0.0


async def _heartbeats_direct(url: str, concurrency: int, count: int) -> DirectResult:
    store = open_store(url, max_size=concurrency + 2)
    ws, agent = await setup_store(store, concurrency)
    try:
        claims = [await store.claim_next(ws, agent, 60) for _ in range(concurrency)]
        per = count // concurrency

        async def beat(job_id: uuid.UUID, claim_id: uuid.UUID | None) -> None:
            for _ in range(per):
                await store.heartbeat(ws, job_id, claim_id, None)

        before = _hot(url)
        cpu0, pg = self_cpu_seconds(), PostgresCpu()
        t0 = time.perf_counter()
        await asyncio.gather(*(beat(c.id, c.claim_id) for c in claims if c))
        elapsed = time.perf_counter() - t0
        result = DirectResult(per * concurrency, elapsed, self_cpu_seconds() - cpu0, pg.seconds())
    finally:
        await store.close()
    result.hot_share = _hot_share(url, before)
    return result


def heartbeats_direct(kind: str, concurrency: int, count: int) -> DirectResult:
    with database(kind) as url:
        return asyncio.run(_heartbeats_direct(url, concurrency, count))


async def _heartbeats_http(server: Server, concurrency: int, count: int) -> float:
    per = count // concurrency
    await enqueue(server, concurrency)

    async def agent() -> None:
        conn = await Connection.open(server.url)
        try:
            status, body = await conn.request(
                "POST",
                server.path(f"/job-agents/{server.agent}/claim"),
                body={"leaseSeconds": 60, "waitSeconds": 0},
                headers=server.headers,
            )
            job = json.loads(body)
            path = server.path(f"/jobs/{job['id']}/heartbeat")
            beat = {"claimId": job["claimId"]}
            for _ in range(per):
                status, body = await conn.request("POST", path, body=beat, headers=server.headers)
                if status != 200:
                    raise RuntimeError(f"heartbeat: {status} {body[:200]!r}")
        finally:
            await conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(agent() for _ in range(concurrency)))
    return time.perf_counter() - t0


def heartbeats_http(kind: str, concurrency: int, count: int) -> DirectResult:
    with database(kind) as url, Server(url) as server:
        before = _hot(url)
        cpu0, pg = server.cpu(), PostgresCpu()
        elapsed = asyncio.run(_heartbeats_http(server, concurrency, count))
        per = count // concurrency
        result = DirectResult(per * concurrency, elapsed, server.cpu() - cpu0, pg.seconds())
        # Backends flush table statistics when they end (or after ~10 s idle): stop the server.
        server.stop()
        result.hot_share = _hot_share(url, before)
        return result


# --- reaper --------------------------------------------------------------------------------------


def job_id_sql(at: str, *, random: bool = False) -> str:
    """SQL for a job id as the store makes one at time ``at`` (entities.new_job_id: UUIDv7,
    the milliseconds in the first 48 bits, version 7), or a random one (``random``: as the
    store made them before)."""
    if random:
        return "gen_random_uuid()"
    millis = f"substring(int8send(floor(extract(epoch FROM {at}) * 1000)::bigint) FROM 3)"
    v4 = f"overlay(uuid_send(gen_random_uuid()) PLACING {millis} FROM 1 FOR 6)"
    return f"encode(set_bit(set_bit({v4}, 52, 1), 53, 1), 'hex')::uuid"  # version 4 -> 7


# Bulk-insert ``{claims}`` running claims of ``{agent}``, ``{expired}`` of them already expired,
# their jobs' ids ``{job_id}`` (job_id_sql; psql; the reaper benchmarks' starting point).
FILL_CLAIMS = """
WITH ids AS (
    SELECT {job_id} AS id, g AS n FROM generate_series(1, {claims}) AS g
), jobs AS (
    INSERT INTO job (id, job_agent_id, workspace_id, status, started_at)
    SELECT i.id, a.id, a.workspace_id, 'inProgress', now()
    FROM ids AS i, job_agent AS a WHERE a.id = '{agent}' RETURNING id
), attempts AS (
    -- Schema v4: a running leased attempt has no job_attempt row (written when it ends).
    SELECT i.id AS job_id, gen_random_uuid() AS claim_id FROM ids AS i
)
INSERT INTO job_claim (job_id, job_agent_id, claimed_at, claim_expires_at, claim_id,
                       lease_seconds, attempt)
SELECT a.job_id, '{agent}', now(),
       CASE WHEN i.n <= {expired} THEN now() - interval '1 minute'
            ELSE now() + interval '1 hour' END,
       a.claim_id, 60, 1
FROM attempts AS a JOIN ids AS i ON i.id = a.job_id
"""


async def _reaper(url: str, claims: int, expired: int) -> tuple[float, float]:
    store = open_store(url)
    try:
        await prepare_reap(store, url, claims, expired)
        t0 = time.perf_counter()
        result = await store.reap(REAP_BATCH, 0)
        busy = time.perf_counter() - t0
        if result.requeued != expired:
            raise RuntimeError(f"reaper requeued {result.requeued}, expected {expired}")
        empties = []
        for _ in range(20):
            t0 = time.perf_counter()
            await store.reap(REAP_BATCH, 0)
            empties.append(time.perf_counter() - t0)
        return busy, sorted(empties)[len(empties) // 2]
    finally:
        await store.close()


def reaper_pass(kind: str, claims: int, expired: int) -> tuple[float, float]:
    """Seconds for one reap() over ``claims`` claims with ``expired`` expired, and an empty one.

    The busy pass is measured once on fresh rows (a second run would find nothing to reap); the
    empty pass is the median of 20.
    """
    with database(kind) as url:
        return asyncio.run(_reaper(url, claims, expired))
