"""The fleet one server process holds: AGENTS agents at once, half idle in a claim long-poll and
half running jobs that heartbeat, with enqueues arriving for the idle ones.

Usage: python -m benchmarks.fleet [--db postgres sqlite] [--agents 1000 5000 10000 20000]
[--seconds 60] [--wait 30] [--lease 60] [--every 20] [--rate 10] [--per-generator 2500]
[--settle 10] [--json PATH] [--gc tuned|threshold|cpython] [--gc-sizes] [--timeline]
[--scheme http https] [--heartbeat-connection keep new] [--connect-budget 120]

For each database and fleet size: a live ``jobagentctl server start`` (its connection cap raised
past the fleet, its descriptor limit the machine's hard limit); AGENTS agents registered; half of
them (the busy ones) each claim a job with a ``--lease`` lease. Generator processes (one per
``--per-generator`` agents, so that none of them is the bound: each one's CPU is printed) then hold
the fleet: an idle agent loops claim-next with ``waitSeconds`` ``--wait`` (its first poll a random
50-100 % of it, as ``run``'s first poll) on its own keep-alive connection (a claimed job is
completed at once, then it polls again); a busy agent heartbeats every ``--every`` seconds (starting
at a random phase), each pause 75-100 % of it as ``run``'s: with ``--heartbeat-connection keep`` on
one connection kept across heartbeats (as the client does since the server keeps a keyed connection
75 s), with ``new`` each on a new connection (as before, when the server closed it after 5 s idle).
``--scheme https`` serves the fleet over TLS (a test CA made here; every new connection a full
handshake: asyncio cannot resume a session). For each scheme and mode side by side, one row each, so
that rows share the machine's load. Server CPU per heartbeat is the server's CPU in the window over
the heartbeats in it (all traffic: the long-polls and pickups are the same in every row), and
connections and TLS handshakes per heartbeat come from the server's ``/metrics``. Every agent starts
at once (a fleet reconnecting to a restarted server); once 99 % of the idle agents wait and 99 % of
the busy ones have had a heartbeat answered (the fleet connected; at most ``--connect-budget``
seconds) and ``--settle`` seconds more, this process measures for SECONDS (``--settle 0``: the first
minute after the fleet connected): it enqueues ``--rate`` jobs a second, each for an idle agent
picked at random, and the generators time every heartbeat (send to answer) and every pickup (enqueue
sent to claim answered, one machine's clock). Server RSS (peak of the samples) and CPU are read from
``/proc``; errors count only what happened inside the window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.common import Server, database, percentile, post_job, proc_cpu_seconds
from benchmarks.httpclient import Connection
from jobagentctl.server.http.heap import settle_heap
from jobagentctl.supervisor.claiming import FIRST_POLL_FRACTION
from jobagentctl.supervisor.lease.heartbeat import JITTER_FLOOR

__all__ = ["FleetFigure", "main", "measure"]

GC_PROBE = Path(__file__).resolve().parent / "gc_probe"

HEADER = (
    "| db | scheme, heartbeat connection | agents (idle / busy) | server RSS MiB | "
    "server CPU % of a core | server CPU ms per heartbeat | heartbeats | connections / "
    "heartbeat | TLS handshakes / heartbeat (resumed) | heartbeat p50 / p99 ms | pickups | "
    "pickup p50 / p99 ms | errors | listen overflows | busiest generator CPU % |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


@dataclass
class FleetFigure:
    db: str
    agents: int
    rss_mib: float
    cpu_percent: float
    heartbeats: int
    heartbeat_p50_ms: float
    heartbeat_p99_ms: float
    pickups: int
    pickup_p50_ms: float
    pickup_p99_ms: float
    errors: int
    generator_cpu_percent: float
    listen_overflows: int = 0
    error_sample: str = ""
    full_collections: int = 0  # the server's, in the window (gc_probe)
    longest_collection_ms: float = 0.0  # its longest collection in the window, wall time
    collection_cpu_s: float = 0.0  # CPU of its logged collections in the window
    scheme: str = "http"
    heartbeat_connection: str = "keep"
    cpu_ms_per_heartbeat: float = 0.0
    connections_per_heartbeat: float = 0.0
    handshakes_per_heartbeat: float = 0.0
    resumed_per_heartbeat: float = 0.0
    # The tail past p99: a pause of the whole server delays every request in flight and the
    # next ones, about 1 % of a minute's heartbeats per 0.6 s of pause at 10,000 agents, so
    # whether p99 shows it hangs on the window's length. p99.9 and the slowest do not.
    heartbeat_p999_ms: float = 0.0
    heartbeat_max_ms: float = 0.0
    longest_collection_objects: int = 0  # the objects it traversed (--gc-sizes), else 0

    def row(self) -> str:
        half = self.agents // 2
        return (
            f"| {self.db} | {self.scheme}, {self.heartbeat_connection} | "
            f"{self.agents:,} ({self.agents - half:,} / {half:,}) | "
            f"{self.rss_mib:.0f} | {self.cpu_percent:.0f} | {self.cpu_ms_per_heartbeat:.2f} | "
            f"{self.heartbeats:,} | {self.connections_per_heartbeat:.2f} | "
            f"{self.handshakes_per_heartbeat:.2f} ({self.resumed_per_heartbeat:.2f}) | "
            f"{self.heartbeat_p50_ms:.1f} / {self.heartbeat_p99_ms:.1f} | {self.pickups:,} | "
            f"{self.pickup_p50_ms:.1f} / {self.pickup_p99_ms:.1f} | {self.errors:,} | "
            f"{self.listen_overflows:,} | "
            f"{self.generator_cpu_percent:.0f} |"
        )


# --- a generator process --------------------------------------------------------------------------


@dataclass
class _Plan:
    url: str
    prefix: str
    key: str
    idle: list[str]  # agent ids
    busy: list[tuple[str, str]]  # (job id, claim id)
    wait: float
    lease: int
    every: float
    start: float  # wall time the window opens (set from the go file)
    end: float  # wall time it closes
    keep: bool = True  # heartbeats keep their connection
    go: str = ""  # holds "start end" once the measuring process has seen the fleet connected
    ready: str = ""  # this generator writes how many busy agents have had a heartbeat answered


class _Generator:
    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.headers = {"X-API-Key": plan.key}
        self.heartbeats: list[tuple[float, float]] = []  # (wall time sent, seconds)
        self.pickups: list[tuple[str, float]] = []  # (job id, wall time claimed)
        self.errors: list[str] = []
        self.beating = 0  # busy agents with a heartbeat answered

    def _error(self, what: str) -> None:
        if self.plan.start <= time.time() <= self.plan.end:
            self.errors.append(what)

    async def idle(self, agent: str) -> None:
        path = f"{self.plan.prefix}/job-agents/{agent}/claim"
        body = {"waitSeconds": self.plan.wait, "leaseSeconds": self.plan.lease}
        # The first long-poll waits a random part of the wait, as `run`'s does: agents that
        # connect together (after a server restart) then re-poll spread out.
        first: dict[str, float] | None = {
            **body,
            "waitSeconds": self.plan.wait * random.uniform(FIRST_POLL_FRACTION, 1),
        }
        conn: Connection | None = None
        while time.time() < self.plan.end:
            try:
                if conn is None:
                    conn = await Connection.open(self.plan.url)
                sent, first = first or body, None
                status, raw = await conn.request("POST", path, body=sent, headers=self.headers)
                if status == 200:
                    job = json.loads(raw)
                    self.pickups.append((job["id"], time.time()))
                    done = {"status": "successful", "claimId": job["claimId"]}
                    status, raw = await conn.request(
                        "PUT",
                        f"{self.plan.prefix}/jobs/{job['id']}/status",
                        body=done,
                        headers=self.headers,
                    )
                    if status != 202:
                        self._error(f"complete: {status} {raw[:120]!r}")
                elif status != 204:
                    self._error(f"claim-next: {status} {raw[:120]!r}")
                    await asyncio.sleep(1)
            except (OSError, asyncio.IncompleteReadError) as exc:
                self._error(f"claim-next: {type(exc).__name__}")
                conn = None
                await asyncio.sleep(1)

    async def busy(self, job: str, claim: str) -> None:
        path = f"{self.plan.prefix}/jobs/{job}/heartbeat"
        await asyncio.sleep(random.uniform(0, self.plan.every))
        conn: Connection | None = None
        answered = False
        while time.time() < self.plan.end:
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = await Connection.open(self.plan.url)
                try:
                    status, raw = await conn.request(
                        "POST", path, body={"claimId": claim}, headers=self.headers
                    )
                except BaseException:
                    await conn.close()
                    conn = None
                    raise
                if not self.plan.keep:
                    await conn.close()
                    conn = None
                took = time.perf_counter() - t0
                if status == 200 and not answered:
                    answered = True
                    self.beating += 1
                if status != 200:
                    self._error(f"heartbeat: {status} {raw[:120]!r}")
                elif self.plan.start <= time.time() <= self.plan.end:
                    self.heartbeats.append((time.time() - took, took))
            except (OSError, asyncio.IncompleteReadError) as exc:
                self._error(f"heartbeat: {type(exc).__name__}")
            pause = self.plan.every * random.uniform(JITTER_FLOOR, 1.0)
            await asyncio.sleep(max(0.0, pause - (time.perf_counter() - t0)))

    async def run(self) -> dict[str, object]:
        # Every agent starts at once (as a fleet reconnecting to a restarted server); nothing
        # is timed until the measuring process has seen them all connected and names the window.
        self.plan.start = self.plan.end = float("inf")
        tasks = [asyncio.create_task(self.idle(a)) for a in self.plan.idle]
        tasks += [asyncio.create_task(self.busy(j, c)) for j, c in self.plan.busy]
        while not (go := Path(self.plan.go)).exists():
            Path(self.plan.ready + ".tmp").write_text(str(self.beating))
            os.replace(self.plan.ready + ".tmp", self.plan.ready)
            await asyncio.sleep(0.25)
        self.plan.start, self.plan.end = map(float, go.read_text().split())
        # This process's own collector must not be what the heartbeats' tail measures: its
        # thousands of connections frozen, and collections on a clock, as the server's.
        settle_heap(asyncio.get_running_loop())
        # A long-poll outlives the window by up to one wait: results do not wait for it.
        await asyncio.sleep(max(0.0, self.plan.end - time.time()) + 1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {"heartbeats": self.heartbeats, "pickups": self.pickups, "errors": self.errors}


def _ready(path: Path) -> int:
    """The busy agents a generator has seen answered (0 before it first writes)."""
    try:
        return int(path.read_text() or 0)
    except FileNotFoundError:
        return 0


def _generator_main(plan_file: str, out_file: str) -> None:
    raise_fd_limit()
    raw = json.loads(Path(plan_file).read_text())
    plan = _Plan(**{**raw, "busy": [tuple(b) for b in raw["busy"]]})
    result = asyncio.run(_Generator(plan).run())
    Path(out_file).write_text(json.dumps(result))


# --- the measuring process ------------------------------------------------------------------------


async def _setup(server: Server, agents: int, lease: int) -> tuple[list[str], list[list[str]]]:
    """Register ``agents`` agents; the busy half each claims a job. Idle ids, busy (job, claim)."""
    ids = [str(uuid.uuid4()) for _ in range(agents)]
    busy_ids = ids[: agents // 2]
    claims: list[list[str]] = []
    queue = list(ids)

    async def worker() -> None:
        conn = await Connection.open(server.url)
        try:
            while queue:
                agent = queue.pop()
                status, raw = await conn.request(
                    "PUT",
                    server.path(f"/job-agents/{agent}"),
                    body={"name": f"fleet-{agent[:8]}", "type": "bench"},
                    headers=server.headers,
                )
                if status != 202:
                    raise RuntimeError(f"register: {status} {raw[:200]!r}")
                if agent not in busy_set:
                    continue
                job = json.loads(await post_job(conn, server, agent, body={}))["id"]
                status, raw = await conn.request(
                    "POST",
                    server.path(f"/job-agents/{agent}/jobs/{job}/claim"),
                    body={"leaseSeconds": lease},
                    headers=server.headers,
                )
                if status != 200:
                    raise RuntimeError(f"claim: {status} {raw[:200]!r}")
                claims.append([job, json.loads(raw)["claimId"]])
        finally:
            await conn.close()

    busy_set = set(busy_ids)
    await asyncio.gather(*(worker() for _ in range(16)))
    return ids[agents // 2 :], claims


def listen_overflows() -> int:
    """The machine's count of connections dropped because a listen queue was full (the
    kernel's TcpExtListenOverflows): a client then waits for its SYN to be sent again (1 s,
    then 3 s, 7 s…), which a latency percentile shows as seconds."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table.get("ListenOverflows", 0))
    return 0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _enqueue_loop(
    server: Server, idle: list[str], rate: float, end: float
) -> tuple[dict[str, float], list[str]]:
    """Enqueue ``rate`` jobs a second for random idle agents until ``end``; each job's send time."""
    sent: dict[str, float] = {}
    errors: list[str] = []
    conn = await Connection.open(server.url)
    try:
        nxt = time.monotonic()
        while time.time() < end:
            agent = random.choice(idle)
            t0 = time.time()
            status, raw = await conn.request(
                "POST", server.path(f"/job-agents/{agent}/jobs"), body={}, headers=server.headers
            )
            if status == 201:
                sent[json.loads(raw)["id"]] = t0
            else:
                errors.append(f"enqueue: {status} {raw[:120]!r}")
            nxt += 1 / rate
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
    finally:
        await conn.close()
    return sent, errors


def _timeline(timed: list[tuple[float, float]]) -> None:
    """Print, per second of the window, how many heartbeats and pickups began in it and the
    slowest of them: where the tail comes from (a burst, or spread)."""
    seconds: dict[int, list[float]] = {}
    for at, took in timed:
        seconds.setdefault(int(at), []).append(took)
    for second in sorted(seconds):
        tooks = seconds[second]
        print(f"# second {second}: {len(tooks)} requests, slowest {max(tooks) * 1000:.0f} ms")


def _collections(log: Path, start: float, end: float) -> tuple[int, float, float, int]:
    """From the server's gc_probe log: full collections in the window, the longest logged
    collection's wall ms, the logged collections' CPU seconds, and with ``--gc-sizes`` the
    objects the longest one traversed (else 0)."""
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    inside = [r for r in rows if start <= float(r[0]) <= end]
    longest = max(inside, key=lambda r: float(r[2]), default=None)
    return (
        sum(1 for r in inside if r[1] == "2"),
        float(longest[2]) if longest else 0.0,
        sum(float(r[3]) for r in inside) / 1000,
        int(longest[4]) if longest and len(longest) > 4 else 0,
    )


def _tls_settings(directory: Path) -> dict[str, str]:
    """A certificate for 127.0.0.1 from a CA made here; the client side trusts it through
    ``JOBAGENTCTL_BENCH_CA`` (benchmarks.httpclient), which the generators inherit."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key, ca_file = directory / "server.pem", directory / "server.key", directory / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for pem in issued.cert_chain_pems[1:]:
        pem.write_to_path(str(cert), append=True)
    key.touch(mode=0o600)
    issued.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    os.environ["JOBAGENTCTL_BENCH_CA"] = str(ca_file)
    return {"tls_cert": str(cert), "tls_key": str(key)}


async def _edge_counts(server: Server) -> tuple[float, float, float]:
    """Connections accepted, full and resumed TLS handshakes, from one /metrics read."""
    conn = await Connection.open(server.url)
    try:
        _, raw = await conn.request("GET", "/metrics")
    finally:
        await conn.close()
    values = {}
    for line in raw.decode().splitlines():
        name, _, value = line.rpartition(" ")
        values[name] = float(value) if value[:1].isdigit() else 0.0
    return (
        values.get("jobagentctl_connections_accepted", 0.0),
        values.get('jobagentctl_tls_handshakes{resumed="no"}', 0.0),
        values.get('jobagentctl_tls_handshakes{resumed="yes"}', 0.0),
    )


def measure(
    db: str, agents: int, args: argparse.Namespace, scheme: str = "http", keep: bool = True
) -> FleetFigure:
    gc_log = Path(tempfile.mkdtemp(prefix="fleet-gc-"), "gc.log")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(GC_PROBE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(GC_PROBE), *paths) if p)
    os.environ["JOBAGENTCTL_BENCH_GC_LOG"] = str(gc_log)
    os.environ["JOBAGENTCTL_BENCH_GC"] = args.gc
    os.environ["JOBAGENTCTL_BENCH_GC_SIZES"] = "1" if args.gc_sizes else ""
    settings = {
        "max_connections": str(agents * 2 + 1000),
        "max_wait_seconds": str(args.wait),
    }
    certs = Path(tempfile.mkdtemp(prefix="fleet-tls-"))
    if scheme == "https":
        settings.update(_tls_settings(certs))
    with database(db) as url, Server(url, settings=settings) as server:
        assert server.proc is not None
        idle, busy = asyncio.run(_setup(server, agents, args.lease))
        generators = max(1, -(-agents // args.per_generator))
        procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
            for g in range(generators):
                plan = _Plan(
                    server.url,
                    server.path(""),
                    server.api_key,
                    idle[g::generators],
                    [tuple(b) for b in busy[g::generators]],  # type: ignore[misc]
                    args.wait,
                    args.lease,
                    args.every,
                    0.0,
                    0.0,
                    keep,
                    str(Path(tmp, "go")),
                    str(Path(tmp, f"ready{g}")),
                )
                plan_file, out = Path(tmp, f"plan{g}.json"), Path(tmp, f"out{g}.json")
                plan_file.write_text(json.dumps(asdict(plan)))
                cmd = [sys.executable, "-m", "benchmarks.fleet", "--generate", str(plan_file)]
                procs.append((subprocess.Popen([*cmd, str(out)]), out))
            try:
                # The window opens --settle seconds after the fleet has connected: every idle
                # agent but 1 % waits in a long-poll, and every busy one but 1 % has had a
                # heartbeat answered (at most --connect-budget seconds given).
                began = time.time()
                waiting = beating = 0.0
                while (
                    waiting < 0.99 * len(idle) or beating < 0.99 * len(busy)
                ) and time.time() < began + args.connect_budget:
                    time.sleep(0.5)
                    waiting = asyncio.run(server.metric("jobagentctl_long_polls_waiting"))
                    beating = sum(_ready(Path(tmp, f"ready{g}")) for g in range(generators))
                took = time.time() - began
                print(
                    f"# {waiting:,.0f} of {len(idle):,} idle agents waiting, {beating:,.0f} of "
                    f"{len(busy):,} busy ones heartbeating after {took:.1f} s"
                )
                start = time.time() + args.settle
                end = start + args.seconds
                Path(tmp, "go.tmp").write_text(f"{start} {end}")
                os.replace(Path(tmp, "go.tmp"), Path(tmp, "go"))
                while time.time() < start:
                    time.sleep(0.5)
                    waiting = asyncio.run(server.metric("jobagentctl_long_polls_waiting"))
                if waiting < len(idle) * 0.95:
                    print(f"# warning: {waiting:.0f} of {len(idle)} idle agents waiting at start")
                overflows0 = listen_overflows()
                edge0 = asyncio.run(_edge_counts(server))
                cpu0, gen0 = server.cpu(), [proc_cpu_seconds(p.pid) for p, _ in procs]
                t0 = time.monotonic()
                rss = [_rss_mib(server.proc.pid)]
                sent, errors = asyncio.run(_enqueue_loop(server, idle, args.rate, end))
                rss.append(_rss_mib(server.proc.pid))
                cpu_s = server.cpu() - cpu0
                edge1 = asyncio.run(_edge_counts(server))
                overflows = listen_overflows() - overflows0
                elapsed = time.monotonic() - t0
                cpu = (server.cpu() - cpu0) / elapsed * 100
                gen_cpu = max(
                    (proc_cpu_seconds(p.pid) - c0) / elapsed * 100
                    for (p, _), c0 in zip(procs, gen0, strict=True)
                )
                results = []
                for proc, out in procs:
                    proc.wait(timeout=args.wait + 60)
                    results.append(json.loads(out.read_text()))
            finally:
                for proc, _ in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
    timed = [(at - start, took) for r in results for at, took in r["heartbeats"]]
    timed += [
        (sent[job] - start, t - sent[job])
        for r in results
        for job, t in r["pickups"]
        if job in sent
    ]
    if args.timeline:
        _timeline(timed)
    heartbeats = [took for r in results for _, took in r["heartbeats"]]
    pickups = [t - sent[job] for r in results for job, t in r["pickups"] if job in sent]
    errors += [e for r in results for e in r["errors"]]
    full, longest, gc_cpu, traversed = _collections(gc_log, start, end)
    shutil.rmtree(gc_log.parent, ignore_errors=True)
    shutil.rmtree(certs, ignore_errors=True)
    beats = max(1, len(heartbeats))
    # Less the two /metrics reads and the enqueuer's connection (one each, full handshakes).
    connections = max(0.0, edge1[0] - edge0[0] - 2)
    full_tls = max(0.0, edge1[1] - edge0[1] - 2) if scheme == "https" else 0.0
    resumed_tls = edge1[2] - edge0[2]
    return FleetFigure(
        db=db,
        agents=agents,
        rss_mib=max(rss),
        cpu_percent=cpu,
        heartbeats=len(heartbeats),
        heartbeat_p50_ms=percentile(heartbeats, 50) * 1000,
        heartbeat_p99_ms=percentile(heartbeats, 99) * 1000,
        heartbeat_p999_ms=percentile(heartbeats, 99.9) * 1000,
        heartbeat_max_ms=max(heartbeats, default=float("nan")) * 1000,
        pickups=len(pickups),
        pickup_p50_ms=percentile(pickups, 50) * 1000,
        pickup_p99_ms=percentile(pickups, 99) * 1000,
        errors=len(errors),
        generator_cpu_percent=gen_cpu,
        listen_overflows=overflows,
        error_sample=errors[0] if errors else "",
        full_collections=full,
        longest_collection_ms=longest,
        collection_cpu_s=gc_cpu,
        longest_collection_objects=traversed,
        scheme=scheme,
        heartbeat_connection="keep" if keep else "new",
        cpu_ms_per_heartbeat=cpu_s * 1000 / beats,
        connections_per_heartbeat=connections / beats,
        handshakes_per_heartbeat=(full_tls + resumed_tls) / beats,
        resumed_per_heartbeat=resumed_tls / beats,
    )


def parser() -> argparse.ArgumentParser:
    """The command line (``benchmarks.run``'s ``fleet`` section parses its own sizes with it)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__)
    parser.add_argument("--db", nargs="+", default=["postgres", "sqlite"])
    parser.add_argument("--agents", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--wait", type=float, default=30.0)
    parser.add_argument("--lease", type=int, default=60)
    parser.add_argument("--every", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--per-generator", type=int, default=2500)
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds from the fleet connected to the window"
    )
    parser.add_argument(
        "--connect-budget",
        type=float,
        default=120.0,
        help="longest wait for the fleet to connect (idle agents in a long-poll, busy ones "
        "answered) before the window",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--gc",
        choices=["tuned", "threshold", "cpython"],
        default="tuned",
        help="the server's collector: as it sets it (heap.py: on a clock), CPython's trigger "
        "made rarer (the server before the clock), or CPython's defaults",
    )
    parser.add_argument(
        "--gc-sizes",
        action="store_true",
        help="count the objects each logged collection traverses (a walk: it lengthens them)",
    )
    parser.add_argument(
        "--timeline", action="store_true", help="per second: requests begun, the slowest"
    )
    parser.add_argument("--scheme", nargs="+", choices=["http", "https"], default=["http"])
    parser.add_argument(
        "--heartbeat-connection",
        nargs="+",
        choices=["keep", "new"],
        default=["keep"],
        help="heartbeats keep one connection (the client now), or each opens one (before)",
    )
    return parser


def raise_fd_limit() -> None:
    """The soft descriptor limit up to the hard one (the server process inherits it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--generate"]:
        _generator_main(argv[1], argv[2])
        return 0
    args = parser().parse_args(argv)
    raise_fd_limit()
    figures = []
    print(HEADER, flush=True)
    rows = [
        (db, agents, scheme, mode)
        for db in args.db
        for agents in args.agents
        for scheme in args.scheme
        for mode in args.heartbeat_connection
    ]
    for db, agents, scheme, mode in rows:
        try:
            figure = measure(db, agents, args, scheme, keep=mode == "keep")
        except Exception as exc:  # a fleet too big for this machine is a result too
            print(
                f"| {db} | {scheme}, {mode} | {agents:,} | failed: {type(exc).__name__}: {exc} |",
                flush=True,
            )
            continue
        figures.append(figure)
        print(figure.row(), flush=True)
        print(
            f"#   server GC in the window: {figure.full_collections} full collections, "
            f"longest {figure.longest_collection_ms:.0f} ms, "
            f"{figure.collection_cpu_s:.2f} s CPU (collector: {args.gc}); "
            f"heartbeat p99.9 {figure.heartbeat_p999_ms:.1f} ms, slowest "
            f"{figure.heartbeat_max_ms:.1f} ms",
            flush=True,
        )
        if figure.longest_collection_objects:
            print(
                f"#   the longest collection traversed "
                f"{figure.longest_collection_objects:,} objects",
                flush=True,
            )
        if figure.error_sample:
            print(f"#   first error: {figure.error_sample}", flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
