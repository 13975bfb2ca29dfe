"""ctrlplane's own API server as the peer: claim-by-id + status cycles per second and server CPU
per cycle on ctrlplane, on ours (the V1 path: claim by id, then status; the V2 path: claim-next,
then status with its claim id) and through ours in gateway mode in front of ctrlplane, with the
same client.

Usage: python -m benchmarks.peer_ctrlplane [--cycles 300] [--state /tmp/cp/run/state.json]
           [--ours-only] [--against git:REV --rounds 3] [--statements]

ctrlplane is the real ``apps/api`` that ``../shared/ctrlplane/up.sh`` runs (URL
``CTRLPLANE_BENCH_URL``, default http://127.0.0.1:18300; its state file holds the workspace, its
slug, the agent and the key, never printed; its server's pid is ``api.pid`` beside it). Its jobs
are inserted into its database (``CP_DSN``, default
postgresql://postgres@127.0.0.1:55432/ctrlplane) shaped as ``cpseed.py job`` writes them (job +
release_job, status queued). Where it is not reachable its rows are skipped with the reason
(``--ours-only`` skips them anyway), and ours are still measured: the V1 path's cost over the
V2 path's is a figure of its own. Ours is a ``server start`` on the project's PostgreSQL (the
test server, 127.0.0.1:5432: ctrlplane's is its own private instance). The gateway row is a
``server start`` in gateway mode (``server init --upstream-workspace SLUG --upstream-url URL``,
ctrlplane's key in ``JOBAGENTCTL_SERVER_UPSTREAM_API_KEY``, docs/gateway.md) on a database of
its own on the project's PostgreSQL, driven by the same V1 cycles on ctrlplane's jobs; its CPU
is the gateway's, with ctrlplane's CPU during that run beside it (the gateway calls ctrlplane
for each claim and each status).

One client connection, one cycle at a time (low concurrency: the cost per cycle, not a
ceiling); server CPU from ``/proc`` (the node process for ctrlplane, the server process for
ours; the database's own CPU is not counted on either side).

``--against git:REV``: an A/B of ours alone, this tree against the source at git revision REV,
V1 and V2 each, alternating over ``--rounds`` rounds (medians). ``--statements``: the store
statements of one cycle on each path, counted in-process at the store's connector, on both
databases.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Server,
    cli,
    database,
    free_port,
    post_job,
    proc_cpu_seconds,
    wait_for_port,
)
from benchmarks.figures import Row, verdict
from benchmarks.hotpath_ab import SourceServer, export_source
from benchmarks.httpclient import Connection

__all__ = ["PeerFigure", "main", "section", "statements_per_cycle"]

CP_URL = os.environ.get("CTRLPLANE_BENCH_URL", "http://127.0.0.1:18300")
CP_DSN = os.environ.get("CP_DSN", "postgresql://postgres@127.0.0.1:55432/ctrlplane")
# Where ../shared/ctrlplane/up.sh leaves its state (BENCH_CTRLPLANE_STATE overrides it).
CP_STATE = Path(os.environ.get("BENCH_CTRLPLANE_STATE", "/tmp/cp/run/state.json"))
CTRLPLANE = "ctrlplane (V1 routes)"
V1 = "ours, V1 path (claim by id + status)"
V2 = "ours, V2 path (claim-next + status)"
GATEWAY = "ours as a gateway in front of ctrlplane (V1 routes)"
# The V1 path's target: no dearer than the V2 path (issue 33, item 4).
V1_OVER_V2_TARGET = 1.0
CTRLPLANE_TARGET = 0.2


@dataclass(frozen=True)
class PeerFigure:
    who: str
    cycles: int
    per_second: float
    cpu_ms_per_cycle: float
    # The gateway row: ctrlplane's CPU per cycle during the same run (it serves every call).
    upstream_cpu_ms_per_cycle: float | None = None


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


def _measure(pids: list[int], run: Any) -> tuple[int, float, list[float]]:
    """Cycles done, wall seconds and the CPU seconds of each of ``pids`` over ``run``."""
    cpu0 = [proc_cpu_seconds(pid) for pid in pids]
    done, wall = asyncio.run(run)
    return done, wall, [proc_cpu_seconds(pid) - c for pid, c in zip(pids, cpu0, strict=True)]


def _ctrlplane(st: dict[str, Any], pid: int, cycles: int) -> PeerFigure:
    jobs = _seed_ctrlplane(st, cycles)
    prefix = f"/api/v1/workspaces/{st['workspaceId']}"
    done, wall, (cpu,) = _measure(
        [pid], _cycles(CP_URL, prefix, st["apiKey"], st["agentId"], jobs, cycles)
    )
    return PeerFigure(CTRLPLANE, done, done / wall, cpu * 1000 / done)


def measure_ours(server: Server, cycles: int) -> list[PeerFigure]:
    """The V1 and V2 rows of one started server (each path on jobs of its own)."""
    assert server.proc is not None
    figures = []
    for who in (V1, V2):
        ids = asyncio.run(_enqueue(server, cycles))
        done, wall, (cpu,) = _measure(
            [server.proc.pid],
            _cycles(
                server.url,
                server.path(""),
                server.api_key,
                server.agent,
                ids if who == V1 else None,
                cycles,
            ),
        )
        figures.append(PeerFigure(who, done, done / wall, cpu * 1000 / done))
    return figures


@contextmanager
def gateway(st: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """A gateway in front of ctrlplane, on a database of its own: (process, URL, its key)."""
    with database("postgres") as url:
        env = {
            **os.environ,
            "JOBAGENTCTL_SERVER_DATABASE": url,
            "JOBAGENTCTL_SERVER_UPSTREAM_API_KEY": st["apiKey"],  # the environment, never argv
        }
        init = json.loads(
            cli(
                "server",
                "init",
                "-o",
                "json",
                "--upstream-url",
                CP_URL,
                "--upstream-workspace",
                st["slug"],
                env=env,
            )
        )
        port = free_port()
        env.update(
            JOBAGENTCTL_SERVER_UPSTREAM_URL=CP_URL,
            JOBAGENTCTL_SERVER_PORT=str(port),
            JOBAGENTCTL_SERVER_HOST="127.0.0.1",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobagentctl", "server", "start"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(proc, port)
            yield proc, f"http://127.0.0.1:{port}", init["apiKey"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _gateway(st: dict[str, Any], cp_pid: int, cycles: int) -> PeerFigure:
    jobs = _seed_ctrlplane(st, cycles)
    prefix = f"/api/v1/workspaces/{st['workspaceId']}"
    with gateway(st) as (proc, url, key):
        done, wall, (cpu, upstream) = _measure(
            [proc.pid, cp_pid], _cycles(url, prefix, key, st["agentId"], jobs, cycles)
        )
    return PeerFigure(GATEWAY, done, done / wall, cpu * 1000 / done, upstream * 1000 / done)


def measure(
    cycles: int, state: Path = CP_STATE, *, ours_only: bool = False
) -> tuple[list[PeerFigure], str | None]:
    """Every row that can be measured here, and why ctrlplane's were skipped (None: they were
    not). Order: ctrlplane, ours V1, ours V2, the gateway."""
    why = "--ours-only" if ours_only else unreachable(state)
    st: dict[str, Any] = {}
    pid = 0
    figures = []
    if why is None:
        st = json.loads(state.read_text())
        pid = int((state.parent / "api.pid").read_text().strip())
        figures.append(_ctrlplane(st, pid, cycles))
    with database("postgres") as url, Server(url) as server:
        figures += measure_ours(server, cycles)
    if why is None:
        figures.append(_gateway(st, pid, cycles))
    return figures, why


async def _enqueue(server: Server, count: int) -> list[str]:
    conn = await Connection.open(server.url)
    ids = []
    try:
        for _ in range(count):
            ids.append(json.loads(await post_job(conn, server))["id"])
    finally:
        await conn.close()
    return ids


# --- statements per cycle, in-process -------------------------------------------------------


async def _statements(url: str, cycles: int) -> dict[str, list[str]]:
    import httpx

    from jobagentctl.server.http.app import create_app
    from jobagentctl.server.http.auth import generate_key
    from jobagentctl.server.settings import ServerSettings
    from jobagentctl.server.store import open_store

    store = open_store(url)
    await store.open()
    try:
        await store.migrate()
        ws = await store.entities.create_workspace("bench")
        key = generate_key()
        await store.entities.create_api_key(ws, None, key.prefix, key.secret_hash)
        agent = uuid.uuid4()
        await store.entities.upsert_agent(ws, agent, "bench", "bench", {}, None)
        recorded: list[str] = []
        connector: Any = store.db
        depth = [0]
        for name in ("one", "all", "each", "locked"):
            _record(connector, name, recorded, depth)
        app = create_app(ServerSettings(database=url, reap_interval=0), store=store)
        prefix = f"/api/v1/workspaces/{ws}"
        headers = {"X-API-Key": key.value}
        seen: dict[str, list[str]] = {}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench", headers=headers
        ) as client:
            for who in (V1, V2):
                for _ in range(cycles):  # the last cycle's: caches warm, as in a steady loop
                    job = await store.entities.create_job(ws, agent, None, None, None)
                    recorded.clear()
                    if who == V1:
                        r = await client.post(f"{prefix}/job-agents/{agent}/jobs/{job.id}/claim")
                        body: dict[str, Any] = {"status": "successful"}
                    else:
                        r = await client.post(
                            f"{prefix}/job-agents/{agent}/claim", json={"leaseSeconds": 60}
                        )
                        body = {"status": "successful", "claimId": r.json()["claimId"]}
                    assert r.status_code == 200, r.text
                    r = await client.put(f"{prefix}/jobs/{job.id}/status", json=body)
                    assert r.status_code == 202, r.text
                    seen[who] = list(recorded)
        return seen
    finally:
        await store.close()


def _record(connector: Any, name: str, recorded: list[str], depth: list[int]) -> None:
    """Record each call of ``connector.name`` made from outside the connector (PostgreSQL's
    ``each`` runs through its ``all``: one statement, recorded once)."""
    method = getattr(connector, name)

    async def recording(query: str, *args: Any, **kwargs: Any) -> Any:
        outermost = not depth[0]
        depth[0] += 1
        try:
            if name != "locked":
                if outermost:
                    recorded.append(query)
                return await method(query, *args, **kwargs)
            decide = args[0]

            def deciding(row: Any) -> Any:
                write = decide(row)
                recorded.append(f"locked[{query}→{write[0] if write else '-'}]")
                return write

            return await method(query, deciding, *args[1:], **kwargs)
        finally:
            depth[0] -= 1

    setattr(connector, name, recording)


def statements_per_cycle(kind: str, cycles: int = 3) -> dict[str, list[str]]:
    """The store statements (connector calls; ``locked[read→write]`` is one transaction) of one
    steady V1 and V2 cycle on ``kind`` ("postgres" | "sqlite"), the key lookup and the
    throttled presence write left out."""
    with database(kind) as url:
        seen = asyncio.run(_statements(url, cycles))
    return {
        who: [s for s in names if s not in ("get_api_key", "touch_agent")]
        for who, names in seen.items()
    }


# --- an A/B of ours against another revision ----------------------------------------------------


def against(rev: str, cycles: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Server CPU ms per cycle of V1 and V2, this tree ("this") and ``rev``'s source, in an
    order drawn anew each round."""
    tmp = tempfile.mkdtemp(prefix="peer-ab-")
    src = export_source(rev, f"{tmp}/src")
    cpu: dict[str, dict[str, list[float]]] = {"this": {V1: [], V2: []}, rev: {V1: [], V2: []}}
    for r in range(rounds):
        for variant in random.sample(list(cpu), 2):
            with database("postgres") as url:
                if variant == "this":
                    server = Server(url)
                else:
                    server = SourceServer(url)
                    server.src = src
                with server:
                    for f in measure_ours(server, cycles):
                        cpu[variant][f.who].append(f.cpu_ms_per_cycle)
                        print(
                            f"round {r + 1} {variant} {f.who}: {f.cpu_ms_per_cycle:.2f} ms, "
                            f"{f.per_second:.0f}/s",
                            flush=True,
                        )
    return cpu


# --- output -----------------------------------------------------------------------------------


def section(mode: str) -> list[Row]:
    """``make bench`` section ``peer_ctrlplane`` (registered in benchmarks/run.py)."""
    cycles = {"full": 1000, "quick": 300, "smoke": 50}[mode]
    figures, why = measure(cycles)
    by = {f.who: f for f in figures}
    cp = by.get(CTRLPLANE)
    rows = []
    if cp is None:
        rows.append(Row("ctrlplane as the peer", "skipped", why or "", "", "", "—"))
    else:
        rows.append(
            Row(
                f"{cp.who}: claim + status cycles/s, server CPU ms per cycle",
                f"{cp.per_second:.0f}/s, {cp.cpu_ms_per_cycle:.2f} ms",
                "the peer",
                "1.00×",
                "",
                "—",
            )
        )
    for f in figures:
        if f.who == CTRLPLANE:
            continue
        if f.who == GATEWAY:
            assert cp is not None and f.upstream_cpu_ms_per_cycle is not None
            rows.append(
                Row(
                    f"{f.who}: cycles/s, gateway CPU ms per cycle (+ ctrlplane's meanwhile)",
                    f"{f.per_second:.0f}/s, {f.cpu_ms_per_cycle:.2f} ms "
                    f"(+ {f.upstream_cpu_ms_per_cycle:.2f} ms)",
                    f"ctrlplane alone {cp.cpu_ms_per_cycle:.2f} ms",
                    f"{f.cpu_ms_per_cycle / cp.cpu_ms_per_cycle:.2f}×",
                    "",
                    "—",
                )
            )
            continue
        ratio = f.cpu_ms_per_cycle / cp.cpu_ms_per_cycle if cp is not None else None
        rows.append(
            Row(
                f"{f.who}: cycles/s, server CPU ms per cycle",
                f"{f.per_second:.0f}/s, {f.cpu_ms_per_cycle:.2f} ms",
                f"ctrlplane {cp.cpu_ms_per_cycle:.2f} ms"
                if cp is not None
                else "ctrlplane skipped",
                f"{ratio:.2f}×" if ratio is not None else "—",
                f"≤ {CTRLPLANE_TARGET}× ctrlplane's CPU per cycle",
                verdict(None if ratio is None else ratio <= CTRLPLANE_TARGET),
            )
        )
    v1, v2 = by[V1], by[V2]
    over = v1.cpu_ms_per_cycle / v2.cpu_ms_per_cycle
    rows.append(
        Row(
            "ours: V1 path's server CPU per cycle over the V2 path's",
            f"{v1.cpu_ms_per_cycle:.2f} ms",
            f"V2 {v2.cpu_ms_per_cycle:.2f} ms",
            f"{over:.2f}×",
            f"≤ {V1_OVER_V2_TARGET:.1f}× (no dearer than V2)",
            verdict(over <= V1_OVER_V2_TARGET),
        )
    )
    return rows


def _print_table(figures: list[PeerFigure], why: str | None) -> None:
    by = {f.who: f for f in figures}
    cp = by.get(CTRLPLANE)
    v2 = by[V2].cpu_ms_per_cycle
    print("| server | cycles | cycles/s | server CPU ms per cycle | × ctrlplane's | × ours V2 |")
    print("|---|---|---|---|---|---|")
    if cp is None:
        print(f"| {CTRLPLANE} | skipped: {why} | | | | |")
    for f in figures:
        cpu = f"{f.cpu_ms_per_cycle:.2f}"
        if f.upstream_cpu_ms_per_cycle is not None:
            cpu += f" (+ ctrlplane {f.upstream_cpu_ms_per_cycle:.2f})"
        ratio = f"{f.cpu_ms_per_cycle / cp.cpu_ms_per_cycle:.2f}" if cp is not None else "—"
        print(
            f"| {f.who} | {f.cycles} | {f.per_second:.0f} | {cpu} | {ratio} | "
            f"{f.cpu_ms_per_cycle / v2:.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peer_ctrlplane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--state", type=Path, default=CP_STATE)
    parser.add_argument("--ours-only", action="store_true", help="skip ctrlplane and the gateway")
    parser.add_argument("--against", metavar="git:REV", help="A/B of ours against revision REV")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--statements", action="store_true", help="the store statements of one cycle per path"
    )
    args = parser.parse_args(argv)
    if args.statements:
        for kind in ("postgres", "sqlite"):
            for who, names in statements_per_cycle(kind).items():
                print(f"{kind}, {who}: {len(names)} — {', '.join(names)}")
        return 0
    if args.against:
        rev = args.against.removeprefix("git:")
        cpu = against(rev, args.cycles, args.rounds)
        print("| code | V1 ms per cycle (median) | V2 ms per cycle (median) | V1 / V2 |")
        print("|---|---|---|---|")
        for variant, paths in cpu.items():
            v1, v2 = statistics.median(paths[V1]), statistics.median(paths[V2])
            print(f"| {variant} | {v1:.2f} | {v2:.2f} | {v1 / v2:.2f} |")
        return 0
    figures, why = measure(args.cycles, args.state, ours_only=args.ours_only)
    _print_table(figures, why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
