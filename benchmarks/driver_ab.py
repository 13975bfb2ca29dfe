"""The PostgreSQL driver A/B: the bare claim+complete cycle through the store (``direct.py``'s
agent loop, the server's own store calls and SQL), over asyncpg (the server's connector) and
over psycopg (``benchmarks.psycopg_connector``, the server's connector before the swap), in
interleaved rounds on one machine.

Reported per driver: Python CPU per cycle (this process's CPU time / cycles: robust on a busy
machine, where wall-clock rates move with the neighbours) and cycles/s; medians and ranges.

    .venv/bin/python -m benchmarks.driver_ab [--rounds 5] [--agents 4] [--jobs 2000]
        [--layer store|connector|unfenced]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.common import database, self_cpu_seconds
from benchmarks.direct import agent_loop, setup_store
from jobagentctl.models import JobStatus
from jobagentctl.server.store import SqlStore, open_store

DRIVERS = ("psycopg", "asyncpg")


@dataclass
class Round:
    """One driver's run: cycles, wall seconds, this process's CPU seconds."""

    cycles: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.cycles


def make_store(driver: str, url: str, agents: int) -> SqlStore:
    """A store over ``driver``'s connector (not opened)."""
    if driver == "asyncpg":
        return open_store(url, max_size=agents + 2)
    from benchmarks.psycopg_connector import PsycopgConnector

    return SqlStore(PsycopgConnector(url, max_size=agents + 2))


async def connector_loop(store: SqlStore, ws: uuid.UUID, agent: uuid.UUID) -> int:
    """``direct.agent_loop`` one layer down: the same two statements (``claim_next``,
    ``finish_claimed``) through the connector, with no store call or model around them."""
    db = store.connector
    claim = {"agent_id": agent, "workspace_id": ws, "lease_seconds": 60, "limit": 1}
    finish = {
        "workspace_id": ws,
        "agent_scope": None,
        "status": JobStatus.SUCCESSFUL.value,
        "message": None,
        "external_id": None,
        "metadata": None,
        "merged_metadata": None,
        "terminal": True,
        "outcome": "completed",
    }
    done = 0
    while rows := await db.all("claim_next", claim):
        job = rows[0]
        await db.one("finish_claimed", {**finish, "job_id": job["id"], "claim_id": job["claim_id"]})
        done += 1
    return done


async def unfenced_loop(store: SqlStore, ws: uuid.UUID, agent: uuid.UUID) -> int:
    """``direct.agent_loop`` with the completion sent without its claim id (a V1 agent): the
    store's locked path (one transaction: lock the claim row, the job row, read, write)."""
    done = 0
    while (job := await store.claim_next(ws, agent, 60)) is not None:
        await store.set_status(
            ws,
            job.id,
            JobStatus.SUCCESSFUL,
            claim_id=None,
            message=None,
            external_id=None,
            metadata=None,
        )
        done += 1
    return done


LAYERS = {"store": agent_loop, "connector": connector_loop, "unfenced": unfenced_loop}


async def _cycle(driver: str, url: str, agents: int, jobs: int, layer: str) -> Round:
    store = make_store(driver, url, agents)
    ws, agent = await setup_store(store, jobs)
    loop = LAYERS[layer]
    try:
        cpu0 = self_cpu_seconds()
        t0 = time.perf_counter()
        done = sum(await asyncio.gather(*(loop(store, ws, agent) for _ in range(agents))))
        elapsed = time.perf_counter() - t0
        cpu = self_cpu_seconds() - cpu0
    finally:
        await store.close()
    if done != jobs:
        raise RuntimeError(f"{driver}: {done} cycles, {jobs} jobs queued")
    return Round(done, elapsed, cpu)


def run_round(driver: str, agents: int, jobs: int, layer: str = "store") -> Round:
    """One driver's claim+complete of ``jobs`` jobs by ``agents`` agents, on a fresh database,
    on uvloop (as the server) when it is installed."""
    runner: Callable[..., Round]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a server dependency off Windows
        runner = asyncio.run
    with database("postgres") as url:
        return runner(_cycle(driver, url, agents, jobs, layer))


def measure(rounds: int, agents: int, jobs: int, layer: str = "store") -> dict[str, list[Round]]:
    """``rounds`` interleaved rounds of each driver (the order alternates every round)."""
    results: dict[str, list[Round]] = {driver: [] for driver in DRIVERS}
    for n in range(rounds):
        order = DRIVERS if n % 2 == 0 else DRIVERS[::-1]
        for driver in order:
            results[driver].append(run_round(driver, agents, jobs, layer))
    return results


@dataclass
class Median:
    """A driver's medians over its rounds."""

    cpu_ms: float
    rate: float


def medians(results: dict[str, list[Round]]) -> dict[str, Median]:
    """Each driver's median CPU per cycle (ms) and cycles/s."""
    return {
        driver: Median(
            statistics.median(r.cpu_ms for r in rounds), statistics.median(r.rate for r in rounds)
        )
        for driver, rounds in results.items()
    }


def report(results: dict[str, list[Round]]) -> list[str]:
    """One line per driver: median CPU per cycle and rate, with their ranges; then the ratio."""
    lines = []
    for driver, rounds in results.items():
        cpu = [r.cpu_ms for r in rounds]
        rate = [r.rate for r in rounds]
        lines.append(
            f"{driver:8s} CPU/cycle {statistics.median(cpu):.3f} ms "
            f"({min(cpu):.3f}–{max(cpu):.3f}), {statistics.median(rate):,.0f} cycles/s "
            f"({min(rate):,.0f}–{max(rate):,.0f}), {len(rounds)} rounds"
        )
    got = medians(results)
    a, p = got["asyncpg"], got["psycopg"]
    lines.append(
        f"asyncpg / psycopg: CPU per cycle {a.cpu_ms / p.cpu_ms:.2f}×, "
        f"cycles/s {a.rate / p.rate:.2f}×"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--layer",
        choices=sorted(LAYERS),
        default="store",
        help="store: the store's calls (claim_next, set_status) as direct.py; connector: the "
        "same two statements through the connector, no store or model around them; unfenced: "
        "the completion without its claim id (the locked path, one transaction)",
    )
    args = parser.parse_args()
    for line in report(measure(args.rounds, args.agents, args.jobs, args.layer)):
        print(line)


if __name__ == "__main__":
    main()
