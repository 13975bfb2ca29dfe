"""Issue 11 §6: the long-poll herd. With WAITERS claim-next long-polls waiting on one agent, what
does an enqueue for that agent cost, and a heartbeat of another agent?

Usage: python -m benchmarks.herd [--db sqlite postgres] [--waiters 2000] [--seconds 60]
[--idle 10] [--together] [--json PATH]

For each database: a live ``jobagentctl server start`` (default settings: ``max_wait_seconds``
30), a workspace with agent A (the waiters') and agent B (one job claimed with a 600 s lease).
A separate load process opens WAITERS connections, each looping claim-next on A with
``waitSeconds`` 30 (a woken one claims a job and polls again). The waiters start spread over
one wait (30 s), as agents that did not all start in the same second: each then polls again
30 s after its last poll, so about WAITERS/30 polls end and start again every second.
``--together`` starts them all at once instead (a fleet reconnecting after a restart): they then
all answer 204 and poll again at the same moments, every 30 s. Once all of them wait, this
process measures for SECONDS (spanning those moments): an enqueue for A every 0.2 s (each wakes
one waiter) and a heartbeat of B's job every 0.05 s, each on its own keep-alive connection,
timed from send to answer; then, with no traffic, the server's CPU over IDLE seconds
(``/proc``). The same without waiters is the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import Server, database, percentile
from benchmarks.httpclient import Connection

__all__ = ["HerdFigure", "main", "measure"]

_WAIT_SECONDS = 30  # the waiters' waitSeconds (the server's default max_wait_seconds)


@dataclass
class HerdFigure:
    db: str
    waiters: int
    together: bool
    enqueues: int
    enqueue_p50_ms: float
    enqueue_p99_ms: float
    enqueue_max_ms: float
    heartbeats: int
    heartbeat_p50_ms: float
    heartbeat_p99_ms: float
    heartbeat_max_ms: float
    idle_cpu_percent: float  # of one core, no traffic, the waiters waiting

    def row(self) -> str:
        started = "—" if not self.waiters else ("at once" if self.together else "spread")
        return (
            f"| {self.db} | {self.waiters:,} | {started} | {self.enqueue_p50_ms:.1f} | "
            f"{self.enqueue_p99_ms:.1f} | {self.enqueue_max_ms:.0f} | "
            f"{self.heartbeat_p50_ms:.1f} | {self.heartbeat_p99_ms:.1f} | "
            f"{self.heartbeat_max_ms:.0f} | {self.idle_cpu_percent:.1f} % |"
        )


HEADER = (
    "| database | waiters | started | enqueue p50 ms | p99 | max | other agent's heartbeat "
    "p50 ms | p99 | max | server CPU, idle |\n|---|---|---|---|---|---|---|---|---|---|"
)


# --- the load process ---------------------------------------------------------------------------


async def _waiters(url: str, prefix: str, key: str, agent: str, count: int, spread: float) -> None:
    headers = {"X-API-Key": key}
    body = {"waitSeconds": _WAIT_SECONDS, "leaseSeconds": 300}
    path = f"{prefix}/job-agents/{agent}/claim"

    async def waiter(index: int) -> None:
        await asyncio.sleep(spread * index / count)
        conn: Connection | None = None
        while True:
            try:
                if conn is None:
                    conn = await Connection.open(url)
                status, raw = await conn.request("POST", path, body=body, headers=headers)
                if status not in (200, 204):
                    raise RuntimeError(f"claim-next: {status} {raw[:200]!r}")
            except (OSError, asyncio.IncompleteReadError):
                conn = None
                await asyncio.sleep(0.1)

    async def orphaned() -> None:
        parent = os.getppid()
        while os.getppid() == parent:
            await asyncio.sleep(1)
        os._exit(0)  # the measuring process is gone: so is its server

    tasks = [asyncio.create_task(waiter(i)) for i in range(count)]
    tasks.append(asyncio.create_task(orphaned()))
    # Runs until the parent kills it; a waiter that fails for another reason ends the process.
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        task.result()


def _load_main(argv: list[str]) -> None:
    url, prefix, key, agent, count, spread = argv
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_waiters(url, prefix, key, agent, int(count), float(spread)))


# --- the measurement ------------------------------------------------------------------------------


async def _timed_loop(
    server: Server, method: str, rest: str, body: object, period: float, until: float
) -> list[float]:
    conn = await Connection.open(server.url)
    samples: list[float] = []
    try:
        while time.monotonic() < until:
            t0 = time.perf_counter()
            status, raw = await conn.request(
                method, server.path(rest), body=body, headers=server.headers
            )
            samples.append(time.perf_counter() - t0)
            if status not in (200, 201):
                raise RuntimeError(f"{method} {rest}: {status} {raw[:200]!r}")
            await asyncio.sleep(period)
    finally:
        await conn.close()
    return samples


async def _measure(
    server: Server, seconds: float, job: str, claim: str
) -> tuple[list[float], list[float]]:
    """Enqueues for the waiters' agent and heartbeats of the other agent's job, side by side."""
    until = time.monotonic() + seconds
    enqueues, heartbeats = await asyncio.gather(
        _timed_loop(server, "POST", f"/job-agents/{server.agent}/jobs", {}, 0.2, until),
        _timed_loop(server, "POST", f"/jobs/{job}/heartbeat", {"claimId": claim}, 0.05, until),
    )
    return enqueues, heartbeats


def measure(db: str, waiters: int, seconds: float, idle: float, together: bool) -> HerdFigure:
    with database(db) as url, Server(url) as server:
        other = str(uuid.uuid4())
        status, _ = asyncio.run(
            server.call("PUT", f"/job-agents/{other}", {"name": "other", "type": "bench"})
        )
        assert status == 202, status
        status, _ = asyncio.run(server.call("POST", f"/job-agents/{other}/jobs", {}))
        assert status == 201, status
        status, raw = asyncio.run(
            server.call("POST", f"/job-agents/{other}/claim", {"leaseSeconds": 600})
        )
        assert status == 200, status
        claimed = json.loads(raw)
        load = None
        if waiters:
            load = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.herd",
                    "--load",
                    server.url,
                    server.path(""),
                    server.api_key,
                    server.agent,
                    str(waiters),
                    "0" if together else str(_WAIT_SECONDS),
                ],
            )
        try:
            deadline = time.monotonic() + 120 + _WAIT_SECONDS
            while asyncio.run(server.metric("jobagentctl_long_polls_waiting")) < waiters:
                if time.monotonic() > deadline or (load is not None and load.poll() is not None):
                    raise RuntimeError("the waiters did not all start waiting")
                time.sleep(0.5)
            time.sleep(3)  # past the connection burst
            enqueues, heartbeats = asyncio.run(
                _measure(server, seconds, claimed["id"], claimed["claimId"])
            )
            cpu0, t0 = server.cpu(), time.monotonic()
            time.sleep(idle)
            idle_cpu = (server.cpu() - cpu0) / (time.monotonic() - t0) * 100
        finally:
            if load is not None:
                load.kill()
                load.wait()
    return HerdFigure(
        db=db,
        waiters=waiters,
        together=together,
        enqueues=len(enqueues),
        enqueue_p50_ms=percentile(enqueues, 50) * 1000,
        enqueue_p99_ms=percentile(enqueues, 99) * 1000,
        enqueue_max_ms=max(enqueues) * 1000,
        heartbeats=len(heartbeats),
        heartbeat_p50_ms=percentile(heartbeats, 50) * 1000,
        heartbeat_p99_ms=percentile(heartbeats, 99) * 1000,
        heartbeat_max_ms=max(heartbeats) * 1000,
        idle_cpu_percent=idle_cpu,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--load"]:
        _load_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.herd", description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--waiters", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--together", action="store_true", help="start every waiter at once")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    figures = []
    print(HEADER, flush=True)
    for db in args.db:
        for waiters in (0, args.waiters):
            figure = measure(db, waiters, args.seconds, args.idle, args.together)
            figures.append(figure)
            print(figure.row(), flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
