"""The API's claim+complete rate against honest ceilings, each run load-gated.

Every run below gets a database of its own, seeded the same way (``pgbench.seed_queue``: the
queue inserted by SQL, ``VACUUM ANALYZE job``) and runs 8 agents:

- ``api``: ``servers`` real ``jobagentctl server start`` processes on one database; the load
  generator is spread over ``loadgen`` processes (``benchmarks.workers http``, round-robin
  over the servers). CPU per job = the server processes + their own PostgreSQL backends.
- ``direct``: the store's own calls in-process, spread over ``processes`` processes
  (``benchmarks.workers direct``). CPU per job = the client processes + their backends.
- ``pgbench:<design>``: ``benchmarks.pgbench`` (project SQL traced from the store; the seed's
  minimal design; the reduced-write variants). CPU per job = the pgbench connections' backends.
- ``procrastinate`` / ``procrastinate-cli``: the peer at ≥ 40k no-op jobs, statistics gathered
  after deferring, through a worker script and through procrastinate's own CLI worker.

Each measurement first waits (bounded) for the machine to be quiet and records the gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from benchmarks import pgbench
from benchmarks.common import (
    BackendCpu,
    Server,
    database_name,
    postgres_database,
    proc_cpu_seconds,
    psql,
)
from benchmarks.gate import Gate, Measured, cpu_of, wait_quiet
from benchmarks.workers import Workers

AGENTS = 8
# How long each run may wait for the machine to become quiet before it runs anyway (marked).
GATE_WAIT = float(os.environ.get("BENCH_GATE_WAIT", "15"))


@dataclass
class Figure:
    name: str
    cycles: int
    seconds: float
    cpu: float  # seconds: the measured system's own processes (server/worker + its backends)
    backend_cpu: float
    client_cores: float = 0.0  # load generator / client processes, cores
    busiest_client: float = 0.0  # the busiest client process's share of a core
    gate: Gate = field(default_factory=Gate)
    note: str = ""

    @property
    def rate(self) -> float:
        return self.cycles / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_job(self) -> float:
        return 1000 * self.cpu / self.cycles if self.cycles else float("nan")

    @property
    def server_cpu_ms_per_job(self) -> float:
        """The server (or worker) processes alone, without their database backends."""
        return 1000 * (self.cpu - self.backend_cpu) / self.cycles if self.cycles else float("nan")

    @property
    def client_bound(self) -> bool:
        return self.busiest_client >= 0.8


def quiet_gate(smoke: bool) -> Gate:
    """Wait for a quiet machine before a measured run (at once in a smoke run)."""
    return wait_quiet(0 if smoke else GATE_WAIT, sample=0.3 if smoke else 1.0)


def api(
    jobs: int,
    *,
    servers: int = 1,
    loadgen: int = 2,
    smoke: bool = False,
    agents: int = AGENTS,
    database_url: str | None = None,
    batch: int = 0,
    settings: dict[str, str] | None = None,
) -> Figure:
    """``database_url``: an existing database (``server init`` adds a workspace to it).
    ``batch``: agents claim that many jobs per request, the last completion of a batch claims
    the next (issue 14 §3). ``settings``: server settings (``fast_path: false``…)."""
    with contextlib.ExitStack() as stack:
        url = database_url or stack.enter_context(postgres_database())
        first = Server(url, dict(settings or {})).start()
        others: list[Server] = []
        try:
            for _ in range(servers - 1):
                s = Server(url, dict(settings or {}))
                s.start_more(first)
                others.append(s)
            all_servers = [first, *others]
            pgbench.seed_queue(url, first.agent, jobs)
            urls = ",".join(s.url for s in all_servers)
            prefix = first.path("")
            # Wait for quiet before the load generator connects: the server closes idle
            # keep-alive connections after a few seconds.
            gate = quiet_gate(smoke)
            mode, args = "http", [urls, prefix, first.api_key, first.agent]
            if batch:
                mode, args = "http-batch", [*args, str(batch)]
            with Workers(mode, args, loadgen, agents) as workers:
                backends = BackendCpu(url)
                server_pids = [s.proc.pid for s in all_servers if s.proc]
                cpu0 = sum(proc_cpu_seconds(p) for p in server_pids)
                with Measured(
                    gate, lambda: cpu_of([*server_pids, *backends.pids(), *workers.pids])
                ):
                    result = workers.go()
                server_cpu = sum(proc_cpu_seconds(p) for p in server_pids) - cpu0
                db_cpu = backends.seconds()
        finally:
            for s in [first, *others]:
                s.stop()
    return Figure(
        f"api x{servers}" + (f" batch {batch}" if batch else ""),
        result.cycles,
        result.seconds,
        server_cpu + db_cpu,
        db_cpu,
        result.client_cores,
        result.busiest_share,
        gate,
    )


def direct(jobs: int, *, processes: int = 4, smoke: bool = False) -> Figure:
    with postgres_database() as url:
        ws, agent = pgbench.prepare_database(url, "project", jobs)
        with Workers("direct", [url, ws, agent], processes, AGENTS) as workers:
            backends = BackendCpu(url)
            gate = quiet_gate(smoke)
            with Measured(gate, lambda: cpu_of([*backends.pids(), *workers.pids])):
                result = workers.go()
            db_cpu = backends.seconds()
    return Figure(
        f"direct x{processes}",
        result.cycles,
        result.seconds,
        sum(result.cpu) + db_cpu,
        db_cpu,
        result.client_cores,
        result.busiest_share,
        gate,
    )


def project_script() -> tuple[str, dict[str, str]]:
    with postgres_database() as url:
        return pgbench.project_script(url)


def pgbench_design(
    design: str, jobs: int, project: tuple[str, dict[str, str]], *, smoke: bool = False
) -> Figure:
    per_client = max(1, jobs // AGENTS)
    if design == "project":
        script, defines = project
    else:
        script, defines = pgbench.SCRIPTS[design].read_text(), {}
    with postgres_database() as url:
        ws, agent = pgbench.prepare_database(url, design, per_client * AGENTS + AGENTS)
        gate = quiet_gate(smoke)
        # pgbench (our child) and its backends come and go inside the block: the backends'
        # CPU, from their probes, is added to ours afterwards.
        with Measured(gate, dict) as m:
            r = pgbench.run(url, design, script, ws, agent, AGENTS, per_client, defines)
        m.add_ours(r.backend_cpu)
    return Figure(
        f"pgbench {design}",
        r.cycles,
        r.cycles / r.tps,
        r.backend_cpu,
        r.backend_cpu,
        r.client_cpu * r.tps / r.cycles,
        r.client_cpu * r.tps / r.cycles / 2,  # pgbench -j 2: two threads
        gate,
    )


# --- the peer -------------------------------------------------------------------------------------


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _peer_env(url: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "BENCH_PROCRASTINATE_URL": url, "PYTHONPATH": path}


def _peer_defer(url: str, jobs: int) -> None:
    subprocess.run(
        [sys.executable, "-m", "benchmarks.peer_procrastinate", "defer", str(jobs)],
        check=True,
        env=_peer_env(url),
        stdout=subprocess.DEVNULL,
    )
    # Statistics gathered, as autovacuum would have by the time a real queue is this long.
    psql(url, "VACUUM ANALYZE")


def procrastinate_script(jobs: int, *, smoke: bool = False) -> Figure:
    with postgres_database("jabpeer") as url:
        _peer_defer(url, jobs)
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.peer_procrastinate", "work", str(AGENTS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_peer_env(url),
        )
        try:
            assert proc.stdin and proc.stdout
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("procrastinate peer failed before its run")
            backends = BackendCpu(url)
            gate = quiet_gate(smoke)
            with Measured(gate, lambda: cpu_of([proc.pid, *backends.pids()])):
                proc.stdin.write("go\n")
                proc.stdin.flush()
                result = json.loads(proc.stdout.readline())
            db_cpu = backends.seconds()
            proc.stdin.write("exit\n")
            proc.stdin.flush()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return Figure(
        "procrastinate (script)",
        result["jobs"],
        result["seconds"],
        result["workerCpu"] + db_cpu,
        db_cpu,
        gate=gate,
    )


def procrastinate_cli(jobs: int, *, smoke: bool = False) -> Figure:
    """procrastinate's own ``worker`` command. It keeps waiting for jobs once the queue is
    empty, so the run ends when a cheap poll (every 0.1 s) sees no job left; the clock starts at
    the process's start (its imports included, ≈ 0.5 s)."""
    with postgres_database("jabpeer") as url:
        _peer_defer(url, jobs)
        backends = BackendCpu(url)
        gate = quiet_gate(smoke)
        exe = os.path.join(os.path.dirname(sys.executable), "procrastinate")
        live: list[int] = []
        with Measured(gate, lambda: cpu_of([*live, *backends.pids()])):
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                [exe, "--app=benchmarks.peer_procrastinate.app", "worker", "-c", str(AGENTS)],
                env=_peer_env(url),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            live.append(proc.pid)
            try:
                left = "1"
                while left != "0":
                    time.sleep(0.1)
                    if proc.poll() is not None:
                        raise RuntimeError("procrastinate worker exited early")
                    left = psql(
                        url,
                        "SELECT count(*) FROM (SELECT 1 FROM procrastinate_jobs "
                        "WHERE status IN ('todo', 'doing') LIMIT 1) AS x",
                    )
                seconds = time.perf_counter() - t0
                worker_cpu = proc_cpu_seconds(proc.pid)
                db_cpu = backends.seconds()
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        done = int(psql(url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"))
    return Figure(
        "procrastinate (CLI worker)",
        done,
        seconds,
        worker_cpu + db_cpu,
        db_cpu,
        gate=gate,
        note=f"db {database_name(url)}",
    )
