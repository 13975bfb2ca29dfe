"""Issue 11 §5 end to end: a live ``server start`` on a private PostgreSQL that is frozen.

Usage: python -m tools.chaos.db_freeze [--freeze 30] [--leases 20] [--lease-seconds 15]
[--json PATH]

The freeze is a real one: every process of the cluster is SIGSTOPped (connections stay open,
nothing answers, new connections are accepted by the kernel and never served), then SIGCONTed.
Meanwhile LEASES agents heartbeat their leases every second (as ``run`` retries a failing
heartbeat), a prober enqueues a job and reads it back once a second and asks ``/readyz`` twice
a second. Recorded: how long every request started during the freeze took to be answered, and
with what; and, once the store is back, how many of the leases were lost (a heartbeat refused
with 409, or the job claimed again). Leases shorter than the freeze run out while it lasts:
only the outage grace (docs/protocol.md) keeps them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.httpclient import Connection, HTTPError
from tests.fixtures.live_server import LiveServer
from tests.fixtures.waiting import wait_until

from tools.chaos.pgcluster import PgCluster

__all__ = ["FreezeConfig", "FreezeResult", "freeze_cluster", "main", "run_freeze"]

_CLIENT_TIMEOUT = 30.0  # a request unanswered this long counts as unanswered


@dataclass
class FreezeConfig:
    freeze: float = 30.0
    leases: int = 20
    lease_seconds: int = 15
    reap_interval: float = 1.0
    database_timeout: float = 5.0
    settle: float | None = None  # seconds after the thaw before the leases are checked


@dataclass
class Sample:
    kind: str
    started: float  # monotonic
    seconds: float | None  # None: no answer within _CLIENT_TIMEOUT
    status: int | None


@dataclass
class FreezeResult:
    config: FreezeConfig
    samples: list[Sample] = field(default_factory=list)
    frozen_at: float = 0.0
    thawed_at: float = 0.0
    refused: set[str] = field(default_factory=set)  # a heartbeat answered 409
    reclaimed: set[str] = field(default_factory=set)  # more than one attempt by the end
    not_in_progress: set[str] = field(default_factory=set)

    @property
    def lost(self) -> int:
        return len(self.refused | self.reclaimed | self.not_in_progress)

    def during(self, kind: str, margin: float = 0.0) -> list[Sample]:
        """Samples of ``kind`` started while frozen, at least ``margin`` s before the thaw."""
        return [
            s
            for s in self.samples
            if s.kind == kind and self.frozen_at <= s.started < self.thawed_at - margin
        ]

    def slowest(self, kinds: tuple[str, ...]) -> float:
        times = [
            s.seconds if s.seconds is not None else float("inf")
            for kind in kinds
            for s in self.during(kind)
        ]
        return max(times, default=float("nan"))

    def statuses(self, kinds: tuple[str, ...], *, thawed: bool = False) -> dict[str, int]:
        """Statuses of the samples started while frozen and answered while frozen (or, with
        ``thawed``, answered after the thaw, or never)."""
        counts = Counter(
            str(s.status) if s.status is not None else "none"
            for kind in kinds
            for s in self.during(kind)
            if (s.seconds is None or s.started + s.seconds >= self.thawed_at) is thawed
        )
        return dict(sorted(counts.items()))

    def report(self) -> str:
        cfg = self.config
        requests = ("heartbeat", "enqueue", "get")
        n = sum(len(self.during(k)) for k in requests)
        return "\n".join(
            [
                f"PostgreSQL frozen {cfg.freeze:g} s (SIGSTOP), {cfg.leases} leases of "
                f"{cfg.lease_seconds} s heartbeated every 1 s, database_timeout "
                f"{cfg.database_timeout:g} s, reap every {cfg.reap_interval:g} s",
                f"requests started during the freeze: {n}, slowest answer "
                f"{self.slowest(requests):.2f} s, statuses {self.statuses(requests)} "
                f"(answered after the thaw: {self.statuses(requests, thawed=True)})",
                f"/readyz during the freeze: {len(self.during('readyz'))}, slowest answer "
                f"{self.slowest(('readyz',)):.2f} s, statuses {self.statuses(('readyz',))} "
                f"(answered after the thaw: {self.statuses(('readyz',), thawed=True)})",
                f"leases lost: {self.lost} of {cfg.leases} (a heartbeat refused 409: "
                f"{len(self.refused)}, claimed again: {len(self.reclaimed)}, no longer "
                f"inProgress: {len(self.not_in_progress)})",
            ]
        )


# --- the freeze ---------------------------------------------------------------------------------


def _cluster_pids(cluster: PgCluster) -> list[int]:
    """The postmaster first, then every process it started (backends, background workers)."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def _stopped(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) in "Tt"
    except OSError:
        return True  # gone


@contextlib.contextmanager
def freeze_cluster(cluster: PgCluster) -> Iterator[None]:
    """Every process of ``cluster`` stopped (the postmaster first: it forks nothing more) for
    the duration of the block, then continued, children first."""
    pids = _cluster_pids(cluster)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: all(_stopped(pid) for pid in pids), what="the cluster to stop")
        yield
    finally:
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


# --- the load -------------------------------------------------------------------------------------


class _Client:
    """One keep-alive connection with a timeout per request (reopened after a failure)."""

    def __init__(self, server: LiveServer) -> None:
        self._server = server
        self._conn: Connection | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int | None, Any]:
        try:
            if self._conn is None:
                self._conn = await Connection.open(self._server.url)
            status, data = await asyncio.wait_for(
                self._conn.request(
                    method, path, body=body, headers={"X-API-Key": self._server.api_key}
                ),
                _CLIENT_TIMEOUT,
            )
        except (TimeoutError, OSError, HTTPError, asyncio.IncompleteReadError):
            await self.close()
            return None, None
        return status, json.loads(data) if data else None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


async def _timed(
    result: FreezeResult, client: _Client, kind: str, method: str, path: str, body: Any = None
) -> tuple[int | None, Any]:
    started = time.monotonic()
    status, data = await client.request(method, path, body)
    seconds = time.monotonic() - started if status is not None else None
    result.samples.append(Sample(kind, started, seconds, status))
    return status, data


async def _drive(cfg: FreezeConfig, server: LiveServer, cluster: PgCluster) -> FreezeResult:
    result = FreezeResult(cfg)
    api = f"/api/v1/workspaces/{server.workspace_id}"
    agent = server.create_agent("freeze")
    setup = _Client(server)
    leases: list[tuple[str, str]] = []
    for _ in range(cfg.leases):
        status, _ = await setup.request("POST", f"{api}/job-agents/{agent}/jobs", {})
        assert status == 201, status
        status, job = await setup.request(
            "POST", f"{api}/job-agents/{agent}/claim", {"leaseSeconds": cfg.lease_seconds}
        )
        assert status == 200, (status, job)
        leases.append((job["id"], job["claimId"]))
    await setup.close()
    stop = asyncio.Event()

    async def repeat(pause: float, step: Callable[[_Client], Awaitable[None]]) -> None:
        """``step`` on a connection of its own, every ``pause`` s until the run stops."""
        client = _Client(server)
        while not stop.is_set():
            await step(client)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
        await client.close()

    async def heartbeat(job_id: str, claim_id: str, client: _Client) -> None:
        path = f"{api}/jobs/{job_id}/heartbeat"
        body = {"claimId": claim_id}
        status, _ = await _timed(result, client, "heartbeat", "POST", path, body)
        if status == 409:
            result.refused.add(job_id)

    async def write(client: _Client) -> None:
        """An enqueue and a read of what it created (of a leased job when it failed)."""
        path = f"{api}/job-agents/{agent}/jobs"
        status, job = await _timed(result, client, "enqueue", "POST", path, {})
        job_id = job["id"] if status == 201 else leases[0][0]
        await _timed(result, client, "get", "GET", f"{api}/jobs/{job_id}")

    async def ready(client: _Client) -> None:
        await _timed(result, client, "readyz", "GET", "/readyz")

    tasks = [
        asyncio.create_task(repeat(1.0, functools.partial(heartbeat, job_id, claim_id)))
        for job_id, claim_id in leases
    ]
    tasks += [asyncio.create_task(repeat(1.0, write)), asyncio.create_task(repeat(0.5, ready))]
    await asyncio.sleep(3)  # steady state first
    with freeze_cluster(cluster):
        result.frozen_at = time.monotonic()
        await asyncio.sleep(cfg.freeze)
        result.thawed_at = time.monotonic()
    # Long enough for the grace (a third of the lease) and a few reaper passes after it: a
    # lease not saved by a heartbeat by then has been reaped.
    settle = cfg.settle
    if settle is None:
        settle = cfg.lease_seconds / 3 + 5 * cfg.reap_interval + 5
    await asyncio.sleep(settle)
    stop.set()
    await asyncio.gather(*tasks)

    check = _Client(server)
    for job_id, _ in leases:
        status, job = await check.request("GET", f"{api}/jobs/{job_id}")
        assert status == 200, status
        if job["status"] != "inProgress":
            result.not_in_progress.add(job_id)
        status, attempts = await check.request("GET", f"{api}/jobs/{job_id}/attempts")
        assert status == 200, status
        if len(attempts) != 1:
            result.reclaimed.add(job_id)
    await check.close()
    return result


def run_freeze(cfg: FreezeConfig, workdir: Path, cluster: PgCluster | None = None) -> FreezeResult:
    """Run once on ``cluster`` (a new private cluster when None)."""
    own = cluster is None
    if cluster is None:
        cluster = PgCluster().start()
    name = f"freeze_{uuid.uuid4().hex[:8]}"
    try:
        url = cluster.create_database(name)
        settings = {
            "min_lease_seconds": 1,
            "reap_interval": cfg.reap_interval,
            "database_timeout": cfg.database_timeout,
            "log_level": "warning",
        }
        server = LiveServer(url, workdir / "server", settings)
        try:
            server.init()
            server.start()
            return asyncio.run(_drive(cfg, server, cluster))
        finally:
            server.stop(timeout=30)
            server.kill()
    finally:
        if own:
            cluster.stop()
        else:
            cluster.drop_database(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.db_freeze", description=__doc__)
    parser.add_argument("--freeze", type=float, default=30.0, help="seconds frozen (30)")
    parser.add_argument("--leases", type=int, default=20, help="heartbeating leases (20)")
    parser.add_argument("--lease-seconds", type=int, default=15, help="their length (15)")
    parser.add_argument("--database-timeout", type=float, default=5.0, help="the setting (5)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    cfg = FreezeConfig(
        freeze=args.freeze,
        leases=args.leases,
        lease_seconds=args.lease_seconds,
        database_timeout=args.database_timeout,
    )
    with tempfile.TemporaryDirectory(prefix="jobagentctl-freeze-") as tmp:
        result = run_freeze(cfg, Path(tmp))
    print(result.report())
    if args.json:
        requests = ("heartbeat", "enqueue", "get")
        args.json.write_text(
            json.dumps(
                {
                    "config": asdict(cfg),
                    "slowest_request_s": result.slowest(requests),
                    "request_statuses": result.statuses(requests),
                    "request_statuses_after_thaw": result.statuses(requests, thawed=True),
                    "slowest_readyz_s": result.slowest(("readyz",)),
                    "readyz_statuses": result.statuses(("readyz",)),
                    "leases_lost": result.lost,
                },
                indent=2,
            )
        )
    return 0 if result.lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
