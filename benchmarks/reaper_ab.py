"""Reaper pass A/B: variants of the `reap` statement and of its batching, timed side by side.

Usage: python -m benchmarks.reaper_ab [--rows N] [--rounds R] [--variants 'a;b'] [--baseline F]
       [--random-ids] | --sqlite BATCH [--rounds R]

One PostgreSQL database holds N finished jobs and their attempts (``benchmarks.growth``). Each
round, for every variant in turn: the previous round's jobs and claims are removed, 10,000
claims with 1,000 expired are added (``benchmarks.direct.FILL_CLAIMS``), the three tables are
vacuumed and analysed, one empty pass warms the connection, and one pass is timed. Variants run
interleaved round by round, so a busy moment falls on all of them; the median of the rounds is
printed with the load average. ``--sqlite BATCH``: SQLite's pass instead, the store's reap with
that batch over the same claims (made through the store), a fresh database each round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchmarks.common import postgres_database, psql
from benchmarks.direct import FILL_CLAIMS, job_id_sql, setup_store
from benchmarks.growth import load_history
from jobagentctl.models import HEARTBEAT_INTERVAL_MAX, HEARTBEAT_INTERVAL_MIN
from jobagentctl.server.store import SqlStore, open_store, postgres_sql

CLAIMS, EXPIRED = 10000, 1000

# Back to the state FILL_CLAIMS starts from: the history alone (finished jobs, their attempts).
RESET = """
DELETE FROM job_claim;
DELETE FROM job_revoked_claim;
DELETE FROM job_attempt WHERE outcome <> 'completed';
DELETE FROM job WHERE status <> 'successful';
"""

Pass = Callable[[SqlStore], Awaitable[int]]


@dataclass
class Variant:
    name: str
    run: Pass


def _params(batch: int) -> dict[str, object]:
    return {
        "batch_size": batch,
        "max_reclaims": 0,
        "outage_began_ago": 0.0,
        "outage_ended_ago": 1e9,
        "heartbeat_min": HEARTBEAT_INTERVAL_MIN,
        "heartbeat_max": HEARTBEAT_INTERVAL_MAX,
    }


def store_pass(batch: int) -> Pass:
    """The store's own reap() with this batch size."""

    async def run(store: SqlStore) -> int:
        return (await store.reap(batch, 0)).requeued

    return run


def sql_pass(sql: str, batch: int, *, lookahead: bool = False) -> Pass:
    """The store's loop over another `reap` text; ``lookahead``: the statement answers `more`
    (else, as before it did, the loop goes on after a full batch)."""

    async def run(store: SqlStore) -> int:
        db = store.db
        postgres_sql._converted()["reap_variant"] = postgres_sql.to_dollar(sql)
        await db.one("reap_revoked")
        requeued = 0
        while True:
            row = await db.one("reap_variant", **_params(batch))
            if row is None or not row["reaped"]:
                break
            requeued += int(row["requeued"])
            if not (row["more"] if lookahead else int(row["considered"]) >= batch):
                break
        return requeued

    return run


def _on_cpu(pid: int) -> float:
    """Seconds process ``pid`` has run on a CPU (schedstat: nanoseconds, not 10 ms ticks)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


async def _backend_pid(store: SqlStore) -> int:
    async with store.db._connection() as conn:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def _round(
    url: str, store: SqlStore, agent: str, variant: Variant, job_id: str
) -> tuple[float, float]:
    psql(url, RESET)
    await variant.run(store)  # empty: warms the connection
    psql(url, FILL_CLAIMS.format(claims=CLAIMS, expired=EXPIRED, agent=agent, job_id=job_id))
    for table in ("job_claim", "job", "job_attempt"):
        psql(url, f"VACUUM ANALYZE {table}")
    pid = await _backend_pid(store)
    cpu0, t0 = _on_cpu(pid), time.perf_counter()
    requeued = await variant.run(store)
    took, cpu = time.perf_counter() - t0, _on_cpu(pid) - cpu0
    if requeued != EXPIRED:
        raise RuntimeError(f"{variant.name}: requeued {requeued}, expected {EXPIRED}")
    return took, cpu


async def main(rows: int, rounds: int, variants: list[Variant], random_ids: bool) -> None:
    with postgres_database() as url:
        store = open_store(url, min_size=1, max_size=1)
        _, agent = await setup_store(store, 0)
        if rows:
            load_history(url, str(agent), rows, random_ids=random_ids)
        times: dict[str, list[float]] = {v.name: [] for v in variants}
        cpus: dict[str, list[float]] = {v.name: [] for v in variants}
        job_id = job_id_sql("now()", random=random_ids)
        try:
            for r in range(rounds):
                order = variants if r % 2 == 0 else variants[::-1]
                for v in order:
                    took, cpu = await _round(url, store, str(agent), v, job_id)
                    times[v.name].append(took)
                    cpus[v.name].append(cpu)
        finally:
            await store.close()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ids = "random" if random_ids else "time-ordered"
    print(f"{rows:,} finished jobs, {ids} job ids, {rounds} rounds, load average after: {load}")
    for v in variants:
        t = sorted(times[v.name])
        c = statistics.median(cpus[v.name])
        print(
            f"  {v.name:<28} wall median {1000 * statistics.median(t):6.1f} ms   "
            f"min {1000 * t[0]:6.1f}   max {1000 * t[-1]:6.1f}   "
            f"backend on-CPU median {1000 * c:5.1f} ms"
        )


def _no_job_lock(sql: str) -> str:
    """The statement without its `expired` CTE: the jobs locked by the UPDATE itself (it then
    waits for a held job instead of skipping it)."""
    start, end = sql.index("expired AS ("), sql.index("deleted AS (")
    return (sql[:start] + sql[end:]).replace(
        "FROM expired AS e)", "FROM expiring AS e LIMIT %(batch_size)s)"
    )


def variants(baseline: str | None) -> dict[str, Variant]:
    """The store's reap at several batch sizes, the same without its job locks, and the `reap`
    of another SQL file (``baseline``: an older release's queries.sql or leases.sql; older
    statements end a pass on a short batch)."""
    from jobagentctl.server.store.queries import load_queries

    current = load_queries("postgres")["reap"]
    out: dict[str, Variant] = {}
    for b in (500, 1000, 2000):
        out[f"store reap({b})"] = Variant(f"store reap({b})", store_pass(b))
        out[f"no job lock({b})"] = Variant(
            f"no job lock({b})", sql_pass(_no_job_lock(current), b, lookahead=True)
        )
        if baseline is not None:
            with open(baseline) as f:
                text = f.read()
            block = text.split("-- name: reap\n", 1)[1].split("\n\n-- ", 1)[0]
            old = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
            out[f"baseline reap({b})"] = Variant(f"baseline reap({b})", sql_pass(old, b))
    return out


async def sqlite_pass(batch: int) -> float:
    """One SQLite pass over 10,000 claims, 1,000 expired: the jobs made and claimed through the
    store (no bulk SQL for SQLite here), 1,000 claims set an hour into the past, ANALYZE."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory(prefix="jab-") as tmp:
        path = f"{tmp}/reap.db"
        store = open_store(f"sqlite:///{path}")
        ws, agent = await setup_store(store, 0)
        try:
            for _ in range(CLAIMS):
                await store.entities.create_job(ws, agent, {}, None, None)
            while await store.claim_batch(ws, agent, 3600, 100):
                pass
            with sqlite3.connect(path) as conn:
                conn.execute(
                    "UPDATE job_claim SET claim_expires_at = claim_expires_at - 7200 WHERE job_id"
                    " IN (SELECT job_id FROM job_claim ORDER BY random() LIMIT ?)",
                    [EXPIRED],
                )
                conn.execute("ANALYZE")
            t0 = time.perf_counter()
            requeued = (await store.reap(batch, 0)).requeued
            took = time.perf_counter() - t0
        finally:
            await store.close()
    if requeued != EXPIRED:
        raise RuntimeError(f"sqlite: requeued {requeued}, expected {EXPIRED}")
    return took


def sqlite_main(rounds: int, batch: int) -> None:
    times = sorted(asyncio.run(sqlite_pass(batch)) for _ in range(rounds))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"SQLite, no history, {rounds} rounds, load average after: {load}")
    print(
        f"  {f'store reap({batch})':<28} wall median {1000 * statistics.median(times):6.1f} ms   "
        f"min {1000 * times[0]:6.1f}   max {1000 * times[-1]:6.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000, help="finished jobs loaded first")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--variants", default="", help="names, separated by ';' (default: all)")
    parser.add_argument("--baseline", help="another postgres SQL file holding `reap`, timed too")
    parser.add_argument("--random-ids", action="store_true", help="random job ids (UUIDv4)")
    parser.add_argument("--sqlite", type=int, metavar="BATCH", help="SQLite instead, this batch")
    args = parser.parse_args()
    if args.sqlite:
        sqlite_main(args.rounds, args.sqlite)
        raise SystemExit(0)
    known = variants(args.baseline)
    names = [n.strip() for n in args.variants.split(";") if n.strip()] or list(known)
    asyncio.run(main(args.rows, args.rounds, [known[n] for n in names], args.random_ids))
