"""The measurements. Each function returns table rows measured side by side in one run.

A row is (figure, ours, comparison, ratio, target, met). Ratios are ours / comparison, so
what matters survives a noisy shared machine even when absolute numbers drift.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    PostgresCpu,
    Server,
    database,
    enqueue,
    post_job,
    self_cpu_seconds,
)
from benchmarks.httpclient import Connection
from benchmarks.workers import HttpLoops


@dataclass
class Row:
    figure: str
    ours: str
    comparison: str
    ratio: str
    target: str
    met: str
    gate: str = "not gated"


def verdict(ok: bool | None) -> str:
    """A target's cell in a figures table: met, missed (bold), or not judged."""
    return "—" if ok is None else ("yes" if ok else "**no**")


# --- claim + complete cycles through the HTTP API ------------------------------------------------


@dataclass
class CycleResult:
    cycles: int
    seconds: float
    server_cpu: float
    db_cpu: float
    loadgen_cpu: float

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0


async def _http_cycles(server: Server, concurrency: int) -> int:
    """``concurrency`` agents claiming and completing one job at a time, as the load
    generators do (:class:`benchmarks.workers.HttpLoops`); the jobs completed."""
    loops = HttpLoops(server.path(""), server.headers, server.agent, batch=0)

    async def agent() -> None:
        conn = await Connection.open(server.url)
        try:
            await loops.one_by_one(conn)
        finally:
            await conn.close()

    await asyncio.gather(*(agent() for _ in range(concurrency)))
    return loops.done


def http_cycles(kind: str, concurrency: int, jobs: int) -> CycleResult:
    with database(kind) as url, Server(url) as server:
        asyncio.run(enqueue(server, jobs))
        cpu0, pg, me0 = server.cpu(), PostgresCpu(), self_cpu_seconds()
        t0 = time.perf_counter()
        done = asyncio.run(_http_cycles(server, concurrency))
        elapsed = time.perf_counter() - t0
        return CycleResult(
            done,
            elapsed,
            server.cpu() - cpu0,
            pg.seconds() if kind == "postgres" else 0.0,
            self_cpu_seconds() - me0,
        )


# --- pickup latency ------------------------------------------------------------------------------


async def _pickup(server: Server, samples: int, poll_interval: float | None) -> list[float]:
    """Enqueue one job at a time; time from the enqueue request to the agent's claim response."""
    latencies: list[float] = []
    agent_conn = await Connection.open(server.url)
    admin = await Connection.open(server.url)
    try:
        for _ in range(samples):
            claimed = asyncio.get_running_loop().create_future()

            async def agent(fut: asyncio.Future[float] = claimed) -> None:
                while True:
                    wait = 30 if poll_interval is None else 0
                    status, _ = await agent_conn.request(
                        "POST",
                        server.path(f"/job-agents/{server.agent}/claim"),
                        body={"leaseSeconds": 60, "waitSeconds": wait},
                        headers=server.headers,
                    )
                    if status == 200:
                        fut.set_result(time.perf_counter())
                        return
                    if poll_interval is not None:
                        await asyncio.sleep(poll_interval)

            task = asyncio.create_task(agent())
            # Let the long-poll reach the server first; a poller is caught at a random phase.
            await asyncio.sleep(0.05 if poll_interval is None else random.uniform(0, poll_interval))
            t0 = time.perf_counter()
            await post_job(admin, server, body={})
            latencies.append(await claimed - t0)
            await task
    finally:
        await agent_conn.close()
        await admin.close()
    return latencies


def pickup_latency(kind: str, samples: int) -> tuple[list[float], list[float]]:
    with database(kind) as url, Server(url) as server:
        long_poll = asyncio.run(_pickup(server, samples, None))
        polling = asyncio.run(_pickup(server, max(3, samples // 4), 1.0))
    return long_poll, polling


# --- recovery time -------------------------------------------------------------------------------


def recovery(kind: str, trials: int, lease: int, reap_interval: float) -> list[float]:
    """SIGKILL a `run` agent mid-job; time until its job is claimable again."""
    times: list[float] = []
    settings = {"min_lease_seconds": "1", "reap_interval": str(reap_interval)}
    with database(kind) as url, Server(url, settings) as server:
        env = server.agent_env()
        for _ in range(trials):
            asyncio.run(enqueue(server, 1, concurrency=1))
            with tempfile.TemporaryDirectory() as tmp:
                started = Path(tmp) / "started"
                agent = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "jobagentctl",
                        "run",
                        "--lease-seconds",
                        str(lease),
                        "--wait",
                        "10s",
                        "--",
                        "sh",
                        "-c",
                        f"touch {started}; sleep 600",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                deadline = time.monotonic() + 30
                while not started.exists():
                    if time.monotonic() > deadline:
                        raise RuntimeError("agent never started its job")
                    time.sleep(0.01)
                # Killed as soon as the child runs: the clock starts at the kill, so the figure
                # is the time the job stays unclaimable after its agent died (≤ lease + reap).
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
                t0 = time.perf_counter()
                found = asyncio.run(_wait_queued(server))
                times.append(found - t0)
    return times


async def _wait_queued(server: Server) -> float:
    conn = await Connection.open(server.url)
    try:
        while True:
            status, body = await conn.request(
                "GET",
                server.path(f"/job-agents/{server.agent}/jobs?status=queued&limit=1"),
                headers=server.headers,
            )
            if status == 200 and json.loads(body)["total"] > 0:
                t = time.perf_counter()
                # Claim and finish it so the next trial starts clean.
                status, body = await conn.request(
                    "POST",
                    server.path(f"/job-agents/{server.agent}/claim"),
                    body={"waitSeconds": 0},
                    headers=server.headers,
                )
                job = json.loads(body)
                await conn.request(
                    "PUT",
                    server.path(f"/jobs/{job['id']}/status"),
                    body={"status": "successful", "claimId": job["claimId"]},
                    headers=server.headers,
                )
                return t
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


# --- supervision overhead ------------------------------------------------------------------------


def supervision(seconds: float) -> tuple[float, float, float]:
    """CPU share of one core and peak RSS (MB) of `run` around a sleeping child."""
    with database("sqlite") as url, Server(url) as server:
        asyncio.run(enqueue(server, 1, concurrency=1))
        env = server.agent_env()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobagentctl",
                "run",
                "--lease-seconds",
                "15",
                "--",
                "sleep",
                str(seconds),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"run exited {proc.returncode}")
    cpu = usage.ru_utime + usage.ru_stime
    return cpu / wall, usage.ru_maxrss / 1024, wall
