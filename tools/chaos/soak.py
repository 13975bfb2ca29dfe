"""Load held: hundreds of leases claimed and heartbeated on PostgreSQL for minutes, with p50/p99
per operation per window; fails if a lease heartbeated in time is lost or anything is reaped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.httpclient import Connection, HTTPError
from tests.fixtures.databases import sql
from tests.fixtures.live_server import LiveServer

from tools.chaos.pgcluster import PgCluster

__all__ = ["SoakConfig", "SoakResult", "main", "run_soak"]

OPS = ("enqueue", "claim", "heartbeat", "complete")
# A heartbeat sent with less than this left on the lease is "late" (the load generator's
# fault if it is refused), not "in time".
IN_TIME_MARGIN = 0.5


@dataclass
class SoakConfig:
    seconds: float
    leases: int = 300
    lease_seconds: int = 15
    hold: tuple[float, float] = (10.0, 40.0)  # how long a lease is held before completing
    window: float = 60.0  # latency figures per window of this many seconds
    connections: int = 32
    reap_interval: float = 1.0
    seed: int = 1


@dataclass
class SoakResult:
    config: SoakConfig
    windows: dict[int, dict[str, list[float]]]  # window → op → latencies (s)
    last_full_window: int  # later windows hold the wind-down, not the steady load
    in_flight: dict[int, tuple[int, int]]  # window → (min, max) leases held
    loop_lag: dict[int, float]  # window → worst event-loop lag (s): the client's own health
    lost: list[str]  # leases refused although heartbeated in time
    late: int  # heartbeats the client itself sent too late (not the server's fault)
    errors: Counter[str]
    completed: int
    attempt_outcomes: dict[str, int]  # from the database at the end
    reaped: float  # the server's reaped counter

    @property
    def ok(self) -> bool:
        return not self.lost and not self.attempt_outcomes.get("expired", 0) and not self.reaped

    def table(self) -> str:
        lines = [
            "| window | leases in flight | op | requests | req/s | p50 ms | p99 ms | max ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        w = self.config.window
        for index in sorted(self.windows):
            if index > self.last_full_window:
                continue
            low, high = self.in_flight.get(index, (0, 0))
            for op in OPS:
                samples = sorted(self.windows[index].get(op, []))
                if not samples:
                    continue
                lines.append(
                    f"| {index * w:.0f}–{(index + 1) * w:.0f} s | {low}–{high} | {op} | "
                    f"{len(samples)} | {len(samples) / w:.1f} | {_pct(samples, 50) * 1000:.1f} | "
                    f"{_pct(samples, 99) * 1000:.1f} | {samples[-1] * 1000:.1f} |"
                )
        return "\n".join(lines)

    def summary(self) -> str:
        worst_lag = max(self.loop_lag.values(), default=0.0)
        return (
            f"leases completed {self.completed}; lost (heartbeated in time) {len(self.lost)}; "
            f"late heartbeats (client) {self.late}; attempts by outcome {self.attempt_outcomes}; "
            f"reaped {self.reaped:.0f}; errors {dict(self.errors)}; "
            f"worst client loop lag {worst_lag * 1000:.0f} ms"
        )

    def worst_p99(self, op: str) -> float:
        values = [
            _pct(sorted(ops[op]), 99)
            for index, ops in self.windows.items()
            if ops.get(op) and index <= self.last_full_window
        ]
        return max(values, default=0.0)


def _pct(samples: list[float], pct: float) -> float:
    if not samples:
        return 0.0
    index = min(len(samples) - 1, max(0, math.ceil(pct / 100 * len(samples)) - 1))
    return samples[index]


@dataclass
class _State:
    config: SoakConfig
    t0: float
    windows: dict[int, dict[str, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    in_flight: dict[int, tuple[int, int]] = field(default_factory=dict)
    loop_lag: dict[int, float] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    late: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    held: int = 0

    def window(self) -> int:
        return int((time.monotonic() - self.t0) // self.config.window)

    def track_held(self, delta: int) -> None:
        self.held += delta
        index = self.window()
        low, high = self.in_flight.get(index, (self.held, self.held))
        self.in_flight[index] = (min(low, self.held), max(high, self.held))


class _Pool:
    """Keep-alive connections shared by the workers, one request at a time each."""

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self.size = size
        self._idle: asyncio.Queue[Connection | None] = asyncio.Queue()

    async def open(self) -> None:
        for _ in range(self.size):
            self._idle.put_nowait(None)  # opened on first use

    async def request(
        self, method: str, path: str, body: Any, headers: dict[str, str]
    ) -> tuple[int, bytes, float, float]:
        """``(status, body, sent_at, latency)``; the clock starts once a connection is ours."""
        conn = await self._idle.get()
        try:
            if conn is None:
                conn = await Connection.open(self.url)
            sent = time.monotonic()
            status, data = await conn.request(method, path, body=body, headers=headers)
            return status, data, sent, time.monotonic() - sent
        except (OSError, HTTPError, asyncio.IncompleteReadError):
            if conn is not None:
                await conn.close()
            conn = None
            raise
        finally:
            self._idle.put_nowait(conn)

    async def close(self) -> None:
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            if conn is not None:
                await conn.close()


async def _worker(
    n: int, st: _State, pool: _Pool, base: str, agent: str, key: str, stop: asyncio.Event
) -> None:
    worker = _Worker(
        st, pool, base, agent, {"X-API-Key": key}, stop, random.Random(f"{st.config.seed}-{n}")
    )
    await worker.run()


@dataclass
class _Worker:
    """One lease at a time: enqueue a job, claim it, heartbeat through its hold, complete."""

    st: _State
    pool: _Pool
    base: str
    agent: str
    headers: dict[str, str]
    stop: asyncio.Event
    rng: random.Random

    async def call(self, op: str, method: str, path: str, body: Any) -> tuple[int, Any, float]:
        st = self.st
        while True:
            try:
                status, data, sent, latency = await self.pool.request(
                    method, path, body, self.headers
                )
            except (OSError, HTTPError, asyncio.IncompleteReadError) as exc:
                st.errors[f"{op}: {type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)
                continue
            st.windows[st.window()][op].append(latency)
            if status >= 500:
                st.errors[f"{op}: HTTP {status}"] += 1
            return status, (json.loads(data) if data else None), sent

    async def run(self) -> None:
        cfg, st, base, agent = self.st.config, self.st, self.base, self.agent
        # Stagger the start over one lease, so heartbeats spread evenly instead of in waves.
        await asyncio.sleep(self.rng.uniform(0, cfg.lease_seconds))
        while not self.stop.is_set():
            status, _, _ = await self.call("enqueue", "POST", f"{base}/job-agents/{agent}/jobs", {})
            if status != 201:
                st.errors[f"enqueue: HTTP {status}"] += 1
                await asyncio.sleep(0.5)
                continue
            body = {"leaseSeconds": cfg.lease_seconds, "waitSeconds": 5}
            status, job, claim_sent = await self.call(
                "claim", "POST", f"{base}/job-agents/{agent}/claim", body
            )
            if status != 200 or not job:
                if status != 204:
                    st.errors[f"claim: HTTP {status}"] += 1
                continue
            job_id, claim_id = job["id"], job["claimId"]
            deadline = claim_sent + job["leaseSeconds"]
            st.track_held(+1)
            try:
                held = await self.hold(job_id, claim_id, deadline)
                if held is not None:
                    await self.complete(job_id, claim_id, held)
            finally:
                st.track_held(-1)

    async def hold(self, job_id: str, claim_id: str, deadline: float) -> float | None:
        """Heartbeat through the job's hold; the lease's deadline then, None if it was lost."""
        cfg, st = self.st.config, self.st
        end = time.monotonic() + self.rng.uniform(*cfg.hold)
        interval = cfg.lease_seconds / 3
        while True:
            pause = min(interval * self.rng.uniform(0.75, 1.0), end - time.monotonic())
            if pause <= 0:
                return deadline
            await asyncio.sleep(pause)
            if time.monotonic() >= end or self.stop.is_set():
                return deadline  # at the end of the soak, complete at once rather than hold on
            in_time = time.monotonic() < deadline - IN_TIME_MARGIN
            status, answer, sent = await self.call(
                "heartbeat", "POST", f"{self.base}/jobs/{job_id}/heartbeat", {"claimId": claim_id}
            )
            if status == 200:
                deadline = max(deadline, sent + answer["leaseSeconds"])
            elif status == 409:
                if in_time:
                    st.lost.append(f"heartbeat of {job_id} refused {answer}")
                else:
                    st.late += 1
                return None
            else:
                st.errors[f"heartbeat: HTTP {status}"] += 1

    async def complete(self, job_id: str, claim_id: str, deadline: float) -> None:
        st = self.st
        in_time = time.monotonic() < deadline - IN_TIME_MARGIN
        report = {"status": "successful", "claimId": claim_id}
        status, answer, _ = await self.call(
            "complete", "PUT", f"{self.base}/jobs/{job_id}/status", report
        )
        if status == 202:
            st.completed += 1
        elif status == 409 and in_time:
            st.lost.append(f"completion of {job_id} refused {answer}")
        elif status == 409:
            st.late += 1
        else:
            st.errors[f"complete: HTTP {status}"] += 1


async def _lag_probe(st: _State, stop: asyncio.Event) -> None:
    """How late the client's own event loop runs: a lagging client sends late heartbeats."""
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(0.1)
        lag = time.monotonic() - before - 0.1
        index = st.window()
        st.loop_lag[index] = max(st.loop_lag.get(index, 0.0), lag)


async def _drive(cfg: SoakConfig, server: LiveServer, agent: str) -> _State:
    st = _State(cfg, time.monotonic())
    pool = _Pool(server.url, cfg.connections)
    await pool.open()
    stop = asyncio.Event()
    base = f"/api/v1/workspaces/{server.workspace_id}"
    tasks = [
        asyncio.create_task(_worker(n, st, pool, base, agent, server.api_key, stop))
        for n in range(cfg.leases)
    ]
    tasks.append(asyncio.create_task(_lag_probe(st, stop)))
    await asyncio.sleep(cfg.seconds)
    stop.set()
    # Workers finish the lease in hand (at most one hold) so nothing is left to expire.
    done, pending = await asyncio.wait(tasks, timeout=cfg.hold[1] + cfg.lease_seconds + 30)
    for task in pending:
        task.cancel()
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    await pool.close()
    return st


@contextlib.contextmanager
def _server(cfg: SoakConfig, database_url: str | None, workdir: Path) -> Iterator[LiveServer]:
    cluster: PgCluster | None = None
    name = f"soak_{uuid.uuid4().hex[:8]}"
    if database_url is None:
        cluster = PgCluster()
        cluster.start()
        database_url = cluster.create_database(name)
    settings = {
        "min_lease_seconds": 1,
        "reap_interval": cfg.reap_interval,
        "access_log": False,
        "log_level": "warning",
    }
    server = LiveServer(database_url, workdir / "server", settings)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop(timeout=30)
        server.kill()
        if cluster is not None:
            cluster.stop()


def run_soak(cfg: SoakConfig, *, database_url: str | None = None, workdir: Path) -> SoakResult:
    """Run the soak on ``database_url`` (a private PostgreSQL cluster when None)."""
    with _server(cfg, database_url, workdir) as server:
        agent = server.create_agent("soak")
        st = asyncio.run(_drive(cfg, server, agent))
        outcomes = {
            str(outcome): int(count)
            for outcome, count in sql(
                server.database_url,
                "SELECT coalesce(outcome, 'open'), count(*) FROM job_attempt GROUP BY 1",
            )
        }
        status, text = server.request("GET", "/metrics", api_key=None, timeout=10)
        reaped = 0.0
        if status == 200 and isinstance(text, str):
            for line in text.splitlines():
                if line.startswith("jobagentctl_reaped_total{"):
                    reaped += float(line.rsplit(" ", 1)[1])
    return SoakResult(
        config=cfg,
        windows={k: dict(v) for k, v in st.windows.items()},
        last_full_window=int(cfg.seconds // cfg.window) - 1,
        in_flight=st.in_flight,
        loop_lag=st.loop_lag,
        lost=st.lost,
        late=st.late,
        errors=st.errors,
        completed=st.completed,
        attempt_outcomes=outcomes,
        reaped=reaped,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--leases", type=int, default=300, help="leases kept in flight")
    parser.add_argument("--lease-seconds", type=int, default=15)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per figures row")
    parser.add_argument(
        "--database", default=None, help="PostgreSQL URL (default: a private cluster)"
    )
    args = parser.parse_args(argv)
    cfg = SoakConfig(
        seconds=args.minutes * 60,
        leases=args.leases,
        lease_seconds=args.lease_seconds,
        hold=(args.lease_seconds * 2 / 3, args.lease_seconds * 8 / 3),
        window=args.window,
    )
    with tempfile.TemporaryDirectory(prefix="jobagentctl-soak-") as tmp:
        print(
            f"soak: {cfg.leases} leases of {cfg.lease_seconds}s for {args.minutes:g} min",
            file=sys.stderr,
            flush=True,
        )
        result = run_soak(cfg, database_url=args.database, workdir=Path(tmp))
    print(result.table())
    print()
    print(result.summary())
    for line in result.lost[:20]:
        print(f"LOST: {line}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
