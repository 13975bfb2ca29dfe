"""ctrlplane's own API server as the peer: claim-by-id + status cycles per second and server CPU
per cycle on ctrlplane, and on ours (the V1 path: claim by id, then status; the V2 path:
claim-next, then status with its claim id), with the same client.

Usage: python -m benchmarks.peer_ctrlplane [--cycles 300] [--state /tmp/cp/run/state.json]

ctrlplane is the real ``apps/api`` that ``../shared/ctrlplane/up.sh`` runs (URL
``CTRLPLANE_BENCH_URL``, default http://127.0.0.1:18300; its state file holds the workspace, the
agent and the key, never printed; its server's pid is ``api.pid`` beside it). Its jobs are
inserted into its database (``CP_DSN``, default postgresql://postgres@127.0.0.1:55432/ctrlplane)
shaped as ``cpseed.py job`` writes them (job + release_job, status queued). Where it is not
reachable the section is skipped with the reason. Ours is a ``server start`` on the project's
PostgreSQL (the test server, 127.0.0.1:5432: ctrlplane's is its own private instance). One
client connection, one cycle at a time (low concurrency: the cost per cycle, not a ceiling);
server CPU from ``/proc`` (the node process for ctrlplane, the server process for ours; the
database's own CPU is not counted on either side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Server, database, post_job, proc_cpu_seconds
from benchmarks.figures import Row, verdict
from benchmarks.httpclient import Connection

__all__ = ["PeerFigure", "main", "section"]

CP_URL = os.environ.get("CTRLPLANE_BENCH_URL", "http://127.0.0.1:18300")
CP_DSN = os.environ.get("CP_DSN", "postgresql://postgres@127.0.0.1:55432/ctrlplane")
# Where ../shared/ctrlplane/up.sh leaves its state (BENCH_CTRLPLANE_STATE overrides it).
CP_STATE = Path(os.environ.get("BENCH_CTRLPLANE_STATE", "/tmp/cp/run/state.json"))


@dataclass(frozen=True)
class PeerFigure:
    who: str
    cycles: int
    per_second: float
    cpu_ms_per_cycle: float


def unreachable(state: Path) -> str | None:
    """Why ctrlplane cannot be measured here, or None."""
    if not state.is_file() or not (state.parent / "api.pid").is_file():
        return f"no ctrlplane state at {state} (run ../shared/ctrlplane/up.sh)"
    host, _, port = CP_URL.removeprefix("http://").partition(":")
    try:
        socket.create_connection((host, int(port or 80)), timeout=2).close()
    except OSError as exc:
        return f"ctrlplane not reachable at {CP_URL}: {exc}"
    return None


def _seed_ctrlplane(st: dict[str, Any], count: int) -> list[str]:
    import psycopg
    from psycopg.types.json import Json, Jsonb

    jobs = [str(uuid.uuid4()) for _ in range(count)]
    with psycopg.connect(CP_DSN, autocommit=False) as conn, conn.cursor() as cur:
        cur.executemany(
            "insert into job(id, job_agent_id, job_agent_config, status, dispatch_context) "
            "values (%s, %s, %s, 'queued', %s)",
            [(j, st["agentId"], Json({"script": "true"}), Jsonb({})) for j in jobs],
        )
        cur.executemany(
            "insert into release_job(job_id, release_id) values (%s, %s)",
            [(j, st["releaseId"]) for j in jobs],
        )
    return jobs


async def _cycles(
    url: str, prefix: str, key: str, agent: str, jobs: list[str] | None, count: int
) -> tuple[int, float]:
    """``count`` cycles on one connection: claim by id (``jobs``) or claim-next (None), then
    status successful. Cycles done and wall seconds."""
    headers = {"X-API-Key": key}
    conn = await Connection.open(url)
    done = 0
    t0 = time.perf_counter()
    try:
        for i in range(count):
            if jobs is not None:
                status, raw = await conn.request(
                    "POST", f"{prefix}/job-agents/{agent}/jobs/{jobs[i]}/claim", headers=headers
                )
                body: dict[str, Any] = {"status": "successful"}
            else:
                status, raw = await conn.request(
                    "POST",
                    f"{prefix}/job-agents/{agent}/claim",
                    body={"leaseSeconds": 60},
                    headers=headers,
                )
                body = {"status": "successful", "claimId": json.loads(raw)["claimId"]}
            if status != 200:
                raise RuntimeError(f"claim: {status} {raw[:200]!r}")
            job = jobs[i] if jobs is not None else json.loads(raw)["id"]
            status, raw = await conn.request(
                "PUT", f"{prefix}/jobs/{job}/status", body=body, headers=headers
            )
            if status not in (200, 202):
                raise RuntimeError(f"status: {status} {raw[:200]!r}")
            done += 1
    finally:
        await conn.close()
    return done, time.perf_counter() - t0


def _measure(pid: int, run: Any) -> tuple[int, float, float]:
    cpu0 = proc_cpu_seconds(pid)
    done, wall = asyncio.run(run)
    return done, wall, proc_cpu_seconds(pid) - cpu0


def measure(cycles: int, state: Path = CP_STATE) -> list[PeerFigure]:
    figures = []
    st = json.loads(state.read_text())
    pid = int((state.parent / "api.pid").read_text().strip())
    jobs = _seed_ctrlplane(st, cycles)
    prefix = f"/api/v1/workspaces/{st['workspaceId']}"
    done, wall, cpu = _measure(
        pid, _cycles(CP_URL, prefix, st["apiKey"], st["agentId"], jobs, cycles)
    )
    figures.append(PeerFigure("ctrlplane (V1 routes)", done, done / wall, cpu * 1000 / done))
    with database("postgres") as url, Server(url) as server:
        assert server.proc is not None
        for path in ("V1", "V2"):
            ids = asyncio.run(_enqueue(server, cycles))
            done, wall, cpu = _measure(
                server.proc.pid,
                _cycles(
                    server.url,
                    server.path(""),
                    server.api_key,
                    server.agent,
                    ids if path == "V1" else None,
                    cycles,
                ),
            )
            what = "claim by id + status" if path == "V1" else "claim-next + status"
            figures.append(
                PeerFigure(f"ours, {path} path ({what})", done, done / wall, cpu * 1000 / done)
            )
    return figures


async def _enqueue(server: Server, count: int) -> list[str]:
    conn = await Connection.open(server.url)
    ids = []
    try:
        for _ in range(count):
            ids.append(json.loads(await post_job(conn, server))["id"])
    finally:
        await conn.close()
    return ids


def section(mode: str) -> list[Row]:
    """``make bench`` section ``peer_ctrlplane`` (registered in benchmarks/run.py)."""
    why = unreachable(CP_STATE)
    if why is not None:
        return [Row("ctrlplane as the peer", "skipped", why, "", "", "—")]
    cycles = {"full": 1000, "quick": 300, "smoke": 50}[mode]
    figures = measure(cycles)
    cp = figures[0]
    rows = [
        Row(
            f"{cp.who}: claim + status cycles/s, server CPU ms per cycle",
            f"{cp.per_second:.0f}/s, {cp.cpu_ms_per_cycle:.2f} ms",
            "the peer",
            "1.00×",
            "",
            "—",
        )
    ]
    for f in figures[1:]:
        ratio = f.cpu_ms_per_cycle / cp.cpu_ms_per_cycle
        rows.append(
            Row(
                f"{f.who}: cycles/s, server CPU ms per cycle",
                f"{f.per_second:.0f}/s, {f.cpu_ms_per_cycle:.2f} ms",
                f"ctrlplane {cp.cpu_ms_per_cycle:.2f} ms",
                f"{ratio:.2f}×",
                "≤ 0.2× ctrlplane's CPU per cycle",
                verdict(ratio <= 0.2),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peer_ctrlplane", description=__doc__
    )
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--state", type=Path, default=CP_STATE)
    args = parser.parse_args(argv)
    why = unreachable(args.state)
    if why is not None:
        print(f"skipped: {why}")
        return 0
    print("| server | cycles | cycles/s | server CPU ms per cycle | × ctrlplane's |")
    print("|---|---|---|---|---|")
    figures = measure(args.cycles, args.state)
    for f in figures:
        ratio = f.cpu_ms_per_cycle / figures[0].cpu_ms_per_cycle
        print(
            f"| {f.who} | {f.cycles} | {f.per_second:.0f} | {f.cpu_ms_per_cycle:.2f} | "
            f"{ratio:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
