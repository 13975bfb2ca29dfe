"""Load generators spread over several processes, so the client side is never the bottleneck.

One process runs ``agents`` agents, each looping claim → complete until the queue is empty:

    python -m benchmarks.workers http URLS PREFIX API_KEY AGENT_ID AGENTS
    python -m benchmarks.workers http-batch URLS PREFIX API_KEY AGENT_ID BATCH AGENTS
    python -m benchmarks.workers direct DATABASE_URL WORKSPACE_ID AGENT_ID AGENTS

``http`` speaks to one or more server processes (URLS comma-separated; agent i uses
URLS[i % n], the round-robin of the scale-out figures) with the minimal keep-alive client;
``http-batch`` the same, claiming BATCH jobs per request, each batch's last completion
claiming the next batch (claim-next ``limit`` + ``claimNext``);
``direct`` issues the store's own calls in-process (``Store.claim_next`` + ``set_status``, as
the server calls them).
Protocol on stdin/stdout: prints ``ready``, waits for ``go``, runs, prints one JSON line
{"cycles", "seconds", "cpu"} (this process's CPU during the run), then waits for a line before
closing its connections (so the parent can read their backends' CPU while they are alive).
The parent side is ``run_workers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from benchmarks.httpclient import Connection


async def _http(
    urls: list[str], prefix: str, key: str, agent_id: str, agents: int, batch: int = 0
) -> int:
    loops = HttpLoops(prefix, {"X-API-Key": key}, agent_id, batch)
    conns = [await Connection.open(urls[i % len(urls)]) for i in range(agents)]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    cpu0, t0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(loops.agent(c) for c in conns))
    _report(loops.done, time.perf_counter() - t0, _cpu() - cpu0)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for c in conns:
        await c.close()
    return loops.done


@dataclass
class HttpLoops:
    """The agents' loops over the API, one connection each; ``done``: the jobs completed."""

    prefix: str
    headers: dict[str, str]
    agent_id: str
    batch: int
    done: int = 0

    async def agent(self, conn: Connection) -> None:
        await (self.batched(conn) if self.batch else self.one_by_one(conn))

    async def _claim(self, conn: Connection, body: dict[str, Any]) -> Any:
        """The claim's answer, None when nothing is queued."""
        claim = f"{self.prefix}/job-agents/{self.agent_id}/claim"
        status, raw = await conn.request("POST", claim, body=body, headers=self.headers)
        if status == 204:
            return None
        if status != 200:
            raise RuntimeError(f"claim: {status} {raw[:200]!r}")
        return json.loads(raw)

    async def _complete(self, conn: Connection, job_id: str, body: dict[str, Any]) -> bytes:
        status, raw = await conn.request(
            "PUT", f"{self.prefix}/jobs/{job_id}/status", body=body, headers=self.headers
        )
        if status != 202:
            raise RuntimeError(f"complete: {status} {raw[:200]!r}")
        self.done += 1
        return raw

    async def batched(self, conn: Connection) -> None:
        # A busy agent's loop with batching (issue 14 §3): claim `batch` jobs in one request,
        # complete them one by one, and let the last completion claim the next batch.
        answer = await self._claim(
            conn, {"leaseSeconds": 60, "waitSeconds": 0, "limit": self.batch}
        )
        if answer is None:
            return
        jobs = answer["items"]
        while jobs:
            *first, last = jobs
            for job in first:
                await self._complete(
                    conn, job["id"], {"status": "successful", "claimId": job["claimId"]}
                )
            body = {
                "status": "successful",
                "claimId": last["claimId"],
                "claimNext": {"leaseSeconds": 60, "limit": self.batch},
            }
            jobs = json.loads(await self._complete(conn, last["id"], body))["claimed"]

    async def one_by_one(self, conn: Connection) -> None:
        while (job := await self._claim(conn, {"leaseSeconds": 60, "waitSeconds": 0})) is not None:
            await self._complete(
                conn, job["id"], {"status": "successful", "claimId": job["claimId"]}
            )


async def _direct(url: str, ws: str, agent_id: str, agents: int) -> int:
    from benchmarks.direct import agent_loop
    from jobagentctl.server.store import open_store

    store = open_store(url, min_size=agents, max_size=agents)
    await store.open()
    wsid, aid = UUID(ws), UUID(agent_id)
    # Open every pooled connection before the clock starts.
    await store.claim_next(wsid, UUID(int=0), 60)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    cpu0, t0 = _cpu(), time.perf_counter()
    done = sum(await asyncio.gather(*(agent_loop(store, wsid, aid) for _ in range(agents))))
    _report(done, time.perf_counter() - t0, _cpu() - cpu0)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await store.close()
    return done


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _report(cycles: int, seconds: float, cpu: float) -> None:
    print(json.dumps({"cycles": cycles, "seconds": seconds, "cpu": cpu}), flush=True)


# --- the parent side ------------------------------------------------------------------------------


@dataclass
class WorkersResult:
    cycles: int
    seconds: float  # wall time from "go" to the last process's result
    cpu: list[float]  # per process
    process_seconds: list[float]

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    @property
    def client_cores(self) -> float:
        return sum(self.cpu) / self.seconds if self.seconds else 0.0

    @property
    def busiest_share(self) -> float:
        """The busiest client process's CPU over its run: ≥ 0.8 means client-bound."""
        return max(c / s for c, s in zip(self.cpu, self.process_seconds, strict=True) if s)


class Workers:
    """``processes`` worker processes sharing ``agents`` agents; ``start`` waits until all are
    ready, ``go`` runs them and returns the totals; ``close`` lets them disconnect."""

    def __init__(self, mode: str, args: list[str], processes: int, agents: int) -> None:
        per = [agents // processes + (1 if i < agents % processes else 0) for i in range(processes)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.workers", mode, *args, str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for n in per
            if n > 0
        ]
        for p in self.procs:
            assert p.stdout
            line = p.stdout.readline().strip()
            if line != "ready":
                self.close()
                raise RuntimeError(f"benchmark worker failed to start ({line!r})")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def go(self) -> WorkersResult:
        t0 = time.perf_counter()
        for p in self.procs:
            assert p.stdin
            p.stdin.write("go\n")
            p.stdin.flush()
        results: list[dict[str, Any]] = []
        for p in self.procs:
            assert p.stdout
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("benchmark worker died")
            results.append(json.loads(line))
        wall = time.perf_counter() - t0
        return WorkersResult(
            sum(r["cycles"] for r in results),
            wall,
            [r["cpu"] for r in results],
            [r["seconds"] for r in results],
        )

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None and p.stdin:
                try:
                    p.stdin.write("exit\n")
                    p.stdin.flush()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> None:
    mode, *rest = argv
    if mode in ("http", "http-batch"):
        # http-batch: BATCH comes before AGENTS (Workers appends the agent count last).
        if mode == "http":
            urls, prefix, key, agent, agents = rest
            batch = "0"
        else:
            urls, prefix, key, agent, batch, agents = rest
        asyncio.run(_http(urls.split(","), prefix, key, agent, int(agents), int(batch)))
    elif mode == "direct":
        url, ws, agent, agents = rest
        asyncio.run(_direct(url, ws, agent, int(agents)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
