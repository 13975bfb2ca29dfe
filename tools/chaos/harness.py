"""The chaos harness: real servers, agents in ``run --loop`` and a seeded fault schedule; checks
the invariants and prints the figures table (``python -m tools.chaos.harness --help``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import heapq
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.fixtures.databases import sql
from tests.fixtures.live_server import LiveServer

from tools.chaos.agents import Agent, alive, children
from tools.chaos.faults import KINDS, Fault, draw_schedule
from tools.chaos.invariants import (
    TERMINAL,
    CheckResult,
    Evidence,
    check,
    parse_executions,
    parse_overlaps,
)
from tools.chaos.pgcluster import PgCluster
from tools.chaos.proxy import FaultProxy, ProxyFault

_T = TypeVar("_T")

__all__ = ["DB_MODES", "ChaosConfig", "ChaosRun", "RunResult", "figures_table", "main"]

DB_MODES = ("sqlite", "postgres", "replicas")
JOB_SCRIPT = """\
# One chaos job: record this execution's start and end, work the job's "sleep" seconds.
# The records are appended with one write each (O_APPEND), so agents never interleave lines.
# The witness of overlaps: every execution holds a lock on a file of its own for as long as
# any process of its tree lives (fd 9 is inherited by sleep; the kernel drops the lock when
# the last holder dies, SIGKILL included). An execution that finds an earlier execution's
# lock of the same job still held started while that one was alive: an overlap.
pause=$(sed -n 's/.*"sleep":\\([0-9.]*\\).*/\\1/p' "$JOBAGENTCTL_JOB_FILE")
locks="$CHAOS_RECORDS.locks"
mine="$locks/$JOBAGENTCTL_JOB_ID.$JOBAGENTCTL_ATTEMPT.$$"
mkdir -p "$locks"
exec 9>"$mine"
flock 9
echo "start $JOBAGENTCTL_JOB_ID $JOBAGENTCTL_ATTEMPT $JOBAGENTCTL_CLAIM_ID $$ $CHAOS_SLOT \
$(date +%s.%N)" >> "$CHAOS_RECORDS"
for other in "$locks/$JOBAGENTCTL_JOB_ID".*; do
  [ "$other" = "$mine" ] && continue
  flock -n "$other" true 2>/dev/null || echo "overlap $JOBAGENTCTL_JOB_ID $JOBAGENTCTL_ATTEMPT \
$JOBAGENTCTL_CLAIM_ID $$ $CHAOS_SLOT ${other#"$locks/$JOBAGENTCTL_JOB_ID".}" >> "$CHAOS_RECORDS"
done
# --slow-stop: the job cleans up for that long on SIGTERM (its lock still held), as a command
# that takes its time to stop does: an operator's requeue must not start it again meanwhile.
if [ "${CHAOS_SLOW_STOP:-0}" != "0" ]; then
  trap 'sleep "$CHAOS_SLOW_STOP"; exit 143' TERM
fi
sleep "${pause:-0.5}"
echo "end $JOBAGENTCTL_JOB_ID $JOBAGENTCTL_ATTEMPT $JOBAGENTCTL_CLAIM_ID $$ $CHAOS_SLOT \
$(date +%s.%N)" >> "$CHAOS_RECORDS"
"""
# How long an agent kill or stop (of the agent alone) may wait for its target to be early in
# a long job (_early_in_a_long_job); then it strikes whatever the agent is doing.
_AIM_SECONDS = 3.0
# How long the agents get to drain (finish the job in hand) before SIGKILL.
_DRAIN_TIMEOUT = 30.0
_METRICS_EVERY = 0.5
_REJECTIONS_METRIC = "jobagentctl_lease_lost_rejections_total"


@dataclass
class ChaosConfig:
    seed: int
    db: str
    jobs: int = 30
    agents: int = 4
    duration: float = 15.0  # the fault phase, seconds
    lease: int = 2
    reap_interval: float = 0.3
    settle_timeout: float = 120.0
    client_timeout: float = 5.0
    calm: bool = False  # no faults: the control run (nothing may be re-run or lost)
    only: tuple[str, ...] | None = None  # draw faults of these kinds only
    watchdog: bool = True  # False: agents run jobs without the watchdog (JOBAGENTCTL_WATCHDOG=0)
    # The share of jobs that outlive a lease + reap interval (they need heartbeats, and a
    # killed or frozen agent's copy of one is still running when the job is re-run: what the
    # watchdog must prevent), and how long they sleep, in leases. The rest sleep 0.05-1.5 s.
    long_jobs: float = 0.4
    long_leases: tuple[float, float] = (2.0, 3.5)
    # Seconds a job takes to exit after SIGTERM (0: at once), within run's --grace of 2 s.
    slow_stop: float = 0.0
    keep: bool = False
    verbose: bool = False

    @property
    def name(self) -> str:
        extra = " calm" if self.calm else ""
        extra += "" if self.watchdog else " no-watchdog"
        return f"seed {self.seed} {self.db}{extra}"


@dataclass
class RunResult:
    config: ChaosConfig
    schedule: list[Fault]
    injected: Counter[str]
    skipped: Counter[str]
    check: CheckResult
    elapsed: float
    settle_seconds: float | None  # from the end of the faults until every job was terminal
    agent_exits: list[str]  # agents that exited without being told to
    workdir: Path | None

    @property
    def ok(self) -> bool:
        # An agent in --loop must outlive every fault: one that exits by itself is a defect.
        return self.check.ok and self.settle_seconds is not None and not self.agent_exits

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run": self.config.name}
        out["jobs"] = self.check.figures["jobs"]
        for kind in KINDS:
            sqlite_db_fault = kind == "db_restart" and self.config.db == "sqlite"
            out[f"faults: {kind}"] = "n/a" if sqlite_db_fault else self.injected[kind]
        out["faults skipped (target busy)"] = sum(self.skipped.values())
        out["proxy requests hit"] = sum(v for k, v in self.injected.items() if k.startswith("hit:"))
        for name, value in self.check.figures.items():
            if name != "jobs":
                out[name] = value
        out["unexpected agent exits"] = len(self.agent_exits)
        out["settled after faults (s)"] = (
            round(self.settle_seconds, 1) if self.settle_seconds is not None else "NO"
        )
        out["wall time (s)"] = round(self.elapsed, 1)
        out["invariants"] = "ok" if self.ok else "VIOLATED"
        return out


def arrival_times(rng: random.Random, cfg: ChaosConfig) -> list[float]:
    """When each job is queued (seconds into the run): a first batch for every agent, then
    bursts. Some gaps are quiet spells longer than a lease, so agents sit in long-polls that
    are older than their lease when work arrives. The calm run spaces its bursts by such
    spells on purpose; the others are squeezed into most of the fault phase."""
    first = min(cfg.jobs, cfg.agents * 2)
    times = [0.0] * first
    t = 0.0
    while len(times) < cfg.jobs:
        if cfg.calm:
            t += 2.0 * cfg.lease + 1.0
        elif rng.random() < 0.3:
            t += rng.uniform(1.5, 3.0) * cfg.lease
        else:
            t += rng.uniform(0.2, 1.0)
        times += [t] * rng.randint(1, 4)
    times = times[: cfg.jobs]
    if not cfg.calm and times[-1] > 0.85 * cfg.duration:
        scale = 0.85 * cfg.duration / times[-1]
        times = [at * scale for at in times]
    return times


# --- one run ---------------------------------------------------------------------------------


@dataclass
class _Down:
    """When a component was down (wall clock); ``end`` None while it is."""

    what: str
    start: float
    end: float | None = None


@dataclass
class _Metrics:
    """Lease-lost rejection counters per server incarnation (a restart resets them)."""

    values: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    complete: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, key: tuple[int, int], text: str) -> None:
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(_REJECTIONS_METRIC + "{"):
                labels, _, value = line.rpartition(" ")
                code = labels.split('code="', 1)[-1].split('"', 1)[0]
                counts[code] = float(value)
        with self.lock:
            old = self.values.get(key, {})
            self.values[key] = {c: max(v, old.get(c, 0.0)) for c, v in {**old, **counts}.items()}

    def totals(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        with self.lock:
            for counts in self.values.values():
                for code, value in counts.items():
                    out[code] += int(value)
        return {k: float(v) for k, v in out.items()}


class ChaosRun:
    """One seed on one database mode. ``pg`` is the private cluster (PostgreSQL modes)."""

    def __init__(
        self, config: ChaosConfig, pg: PgCluster | None = None, base_dir: Path | None = None
    ):
        if config.db not in DB_MODES:
            raise ValueError(f"db must be one of {DB_MODES}")
        if config.db != "sqlite" and pg is None:
            raise ValueError(f"{config.db} needs a private PostgreSQL cluster")
        self.config = config
        self.pg = pg
        self.workdir = Path(
            tempfile.mkdtemp(prefix=f"chaos-{config.seed}-{config.db}-", dir=base_dir)
        )
        self.rng = random.Random(config.seed)
        self.servers: list[LiveServer] = []
        self.agents: list[Agent] = []
        self.proxy: FaultProxy | None = None
        self.database_url = ""
        self._dbname: str | None = None
        self.schedule: list[Fault] = []
        self.injected: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.downs: list[_Down] = []
        self.agent_exits: list[str] = []
        self.interrupt_exits: Counter[int] = Counter()
        self.pauses: list[tuple[int, float, float]] = []  # (slot, SIGSTOP, SIGCONT) wall clock
        self.freezes: list[tuple[int, float, float]] = []  # the same, agent+job (frozen host)
        self.kills: list[tuple[int, float]] = []  # (slot, SIGKILL) of the agent alone
        self.requeues: list[tuple[str, float]] = []  # (job id, when) operator overrides
        self.sleeps: dict[str, float] = {}  # job id → how long its script works
        self.metrics = _Metrics()
        self._events: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = 0
        self._t0 = 0.0
        self._threads: list[threading.Thread] = []
        self._server_busy: set[int] = set()
        self._db_busy = False
        self._stop_scraper = threading.Event()
        self._enqueued = 0
        self._enqueue_done = threading.Event()
        self.timings: dict[str, float] = {}

    # --- logging -----------------------------------------------------------------------------
    def log(self, message: str) -> None:
        if self.config.verbose:
            elapsed = time.monotonic() - self._t0 if self._t0 else 0.0
            print(f"[{self.config.name} {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    def _phase(self, name: str, step: Callable[[], _T]) -> _T:
        began = time.monotonic()
        try:
            return step()
        finally:
            self.timings[name] = time.monotonic() - began

    # --- the whole run -----------------------------------------------------------------------
    def run(self) -> RunResult:
        started = time.monotonic()
        failed = True
        try:
            self._phase("setup", self._setup)
            self._phase("faults", self._fault_phase)
            settle = self._phase("settle", self._settle)
            evidence = self._phase("collect", self._collect)
            result = check(evidence)
            failed = not result.ok or settle is None or bool(self.agent_exits)
        finally:
            self._phase("teardown", lambda: self._teardown(keep=self.config.keep or failed))
        self.log("phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items()))
        return RunResult(
            config=self.config,
            schedule=self.schedule,
            injected=self.injected,
            skipped=self.skipped,
            check=result,
            elapsed=time.monotonic() - started,
            settle_seconds=settle,
            agent_exits=self.agent_exits,
            workdir=self.workdir if (self.config.keep or failed) else None,
        )

    def _setup(self) -> None:
        cfg = self.config
        if cfg.db == "sqlite":
            self.database_url = f"sqlite:///{self.workdir / 'jobagent.db'}"
        else:
            assert self.pg is not None
            self._dbname = f"chaos_{cfg.seed}_{cfg.db}_{uuid.uuid4().hex[:8]}"
            self.database_url = self.pg.create_database(self._dbname)
        settings = {
            "lease_seconds": cfg.lease,
            "min_lease_seconds": 1,
            "reap_interval": cfg.reap_interval,
            "key_cache_seconds": 0,
            # A drain must not outlast the restart the schedule planned.
            "shutdown_timeout": 5,
        }
        first = LiveServer(
            self.database_url, self.workdir / "server0", settings, registry=self.servers
        )
        first.init()
        first.start()
        if cfg.db == "replicas":
            first.replica()
        self.agent_id = first.create_agent("chaos")
        agent_key = first.create_key(self.agent_id)
        self.proxy = FaultProxy(
            [("127.0.0.1", s.port) for s in self.servers],
            cfg.agents,
            rng=random.Random(f"proxy-{cfg.seed}"),
        ).start()
        self.schedule = (
            []
            if cfg.calm
            else draw_schedule(
                cfg.seed,
                duration=cfg.duration,
                agents=cfg.agents,
                servers=len(self.servers),
                lease=cfg.lease,
                postgres=cfg.db != "sqlite",
                only=cfg.only,
            )
        )
        (self.workdir / "schedule.txt").write_text(
            "\n".join(f.describe() for f in self.schedule) + "\n", encoding="utf-8"
        )
        script = self.workdir / "job.sh"
        script.write_text(JOB_SCRIPT, encoding="utf-8")
        self.records_path = self.workdir / "executions.log"
        self.records_path.touch()
        for slot in range(cfg.agents):
            env = first.base_env()
            env.update(
                {
                    "JOBAGENTCTL_URL": self.proxy.url(slot),
                    "JOBAGENTCTL_WORKSPACE": first.workspace_id,
                    "JOBAGENTCTL_AGENT": self.agent_id,
                    "JOBAGENTCTL_API_KEY": agent_key,
                    "JOBAGENTCTL_TIMEOUT": str(cfg.client_timeout),
                    "CHAOS_RECORDS": str(self.records_path),
                    "CHAOS_SLOT": str(slot),
                    "CHAOS_SLOW_STOP": str(cfg.slow_stop),
                    "JOBAGENTCTL_WATCHDOG": "1" if cfg.watchdog else "0",
                }
            )
            command = [
                sys.executable,
                "-m",
                "jobagentctl",
                "run",
                "--loop",
                "--lease-seconds",
                str(cfg.lease),
                "--grace",
                "2s",
                "--report",
                str(self.workdir / f"agent{slot}.report.jsonl"),
                "--",
                "sh",
                str(script),
            ]
            self.agents.append(Agent(slot, self.workdir, env, command))

    # --- event loop --------------------------------------------------------------------------
    def _at(self, offset: float, what: str, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (offset, self._seq, what, action))

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _fault_phase(self) -> None:
        cfg = self.config
        self._t0 = time.monotonic()
        for agent in self.agents:
            agent.start()
        self._spawn(self._enqueue_all, "enqueuer")
        self._spawn(self._scrape_metrics, "metrics")
        for fault in self.schedule:
            self._at(fault.at, fault.kind, functools.partial(self._inject, fault))
        while self._events and self._events[0][0] <= cfg.duration + 60:
            offset, _, _what, action = self._events[0]
            wait = offset - self._now()
            if wait > 0:
                self._watch_agents()
                time.sleep(min(wait, 0.05))
                continue
            heapq.heappop(self._events)
            action()
        self.log("fault phase over")

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # a harness thread must not die silently
                print(f"chaos: {name} failed: {exc!r}", file=sys.stderr, flush=True)
                raise

        thread = threading.Thread(target=guarded, name=f"chaos-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def _watch_agents(self) -> None:
        """An agent that exits without being told to is a finding; restart it to go on."""
        for agent in self.agents:
            if agent.busy or agent.draining or agent.proc is None:
                continue
            code = agent.proc.poll()
            if code is None:
                continue
            tail = agent.log_tail(6).replace("\n", " | ")
            self.agent_exits.append(
                f"agent {agent.slot} (start #{agent.incarnation}) exited {code}: {tail}"
            )
            self.log(f"agent {agent.slot} exited {code} by itself: restarting")
            agent.start()

    # --- faults ------------------------------------------------------------------------------
    def _inject(self, fault: Fault) -> None:
        kind = fault.kind
        if kind in ("agent_kill", "agent_stop", "agent_interrupt"):
            if not self._inject_agent(fault):
                return
        elif kind == "server_restart":
            assert fault.target is not None
            index = fault.target % len(self.servers)
            if index in self._server_busy:
                self.skipped[kind] += 1
                return
            self._server_busy.add(index)
            self._spawn(lambda: self._restart_server(index, fault), f"restart-{index}")
        elif kind == "operator_requeue":
            self._spawn(self._operator_requeue, "requeue")
        elif kind == "db_restart":
            if self._db_busy or any(self._server_busy):
                self.skipped[kind] += 1
                return
            self._db_busy = True
            self._spawn(lambda: self._restart_db(fault), "db-restart")
        else:
            assert self.proxy is not None
            slots = None if fault.target is None else frozenset({fault.target})
            self.proxy.fault = ProxyFault(
                kind=fault.kind.removeprefix("proxy_").split("_")[0],  # type: ignore[arg-type]
                probability=fault.probability,
                label=f"hit:{fault.kind}",
                slots=slots,
                delay=fault.delay,
            )
            self._at(self._now() + fault.duration, "proxy clear", self._clear_proxy)
        self.injected[kind] += 1
        self.log(f"inject {fault.describe()}")

    def _inject_agent(self, fault: Fault) -> bool:
        """An agent fault: whether it was injected now (not skipped, nor aimed later)."""
        kind = fault.kind
        assert fault.target is not None
        agent = self.agents[fault.target]
        if agent.busy or not agent.running():
            self.skipped[kind] += 1
            return False
        with_job = fault.detail == "agent+job"
        if (
            kind in ("agent_kill", "agent_stop")
            and not with_job
            and not self._early_in_a_long_job(agent)
            and self._now() < fault.at + _AIM_SECONDS
        ):
            # Aim where an orphan (kill) or a zombie (stop) would outlive its lease and
            # overlap the job's re-run, which is what the watchdog must prevent.
            self._at(self._now() + 0.2, kind, functools.partial(self._inject, fault))
            return False
        if kind == "agent_kill":
            agent.kill(with_job)
            if not with_job:
                self.kills.append((agent.slot, time.time()))
            self._at(self._now() + fault.duration, "agent restart", agent.start)
        elif kind == "agent_interrupt":
            if not children(agent.pid) and self._now() < fault.at + 3:
                # Interrupting an idle agent tests little: wait for it to hold a job.
                self._at(self._now() + 0.25, kind, functools.partial(self._inject, fault))
                return False
            agent.interrupt()
            self._at(
                self._now() + fault.duration,
                "agent restart",
                functools.partial(self._restart_interrupted, agent),
            )
        else:
            agent.stop(with_job)
            stopped = time.time()

            def resume(agent: Agent = agent, stopped: float = stopped) -> None:
                agent.cont()
                self.pauses.append((agent.slot, stopped, time.time()))
                if with_job:
                    self.freezes.append((agent.slot, stopped, time.time()))

            self._at(self._now() + fault.duration, "agent cont", resume)
        return True

    def _early_in_a_long_job(self, agent: Agent) -> bool:
        """Whether ``agent`` runs a job whose script still has more than a lease + reap
        interval (+ 1 s) of work ahead: killed or frozen now, its copy would still run when
        the job is re-run elsewhere (unless a watchdog stops it)."""
        if not children(agent.pid):
            return False
        executions, _ = parse_executions(self.records_path.read_text(encoding="utf-8"))
        mine = [e for e in executions if e.slot == agent.slot and e.started >= agent.started_at]
        if not mine or mine[-1].ended is not None:
            return False
        current = mine[-1]
        left = current.started + self.sleeps.get(current.job_id, 0.0) - time.time()
        return left > self.config.lease + self.config.reap_interval + 1.0

    def _restart_interrupted(self, agent: Agent) -> None:
        """Start an interrupted agent again once it has released its job and exited."""
        assert agent.proc is not None
        code = agent.proc.poll()
        if code is None:
            self._at(
                self._now() + 0.2,
                "agent restart",
                functools.partial(self._restart_interrupted, agent),
            )
            return
        self.interrupt_exits[code] += 1
        if code != 128 + signal.SIGINT:
            self.agent_exits.append(
                f"agent {agent.slot} exited {code} after SIGINT (SPEC §6.7: 130): "
                + agent.log_tail(3).replace("\n", " | ")
            )
        agent.start()

    def _clear_proxy(self) -> None:
        assert self.proxy is not None
        self.proxy.fault = None

    def _restart_server(self, index: int, fault: Fault) -> None:
        server = self.servers[index]
        down = _Down(f"server{index}", time.time())
        self.downs.append(down)
        try:
            if fault.detail == "SIGKILL":
                self.metrics.complete = False  # counts since the last scrape die with it
                server.kill()
            else:
                self._scrape(index, server)
                server.stop(timeout=30)
            time.sleep(fault.duration)
            server.start()
            assert self.proxy is not None
            # start() may have moved to another port if ours was taken meanwhile.
            self.proxy.upstreams[index] = ("127.0.0.1", server.port)
        finally:
            down.end = time.time()
            self._server_busy.discard(index)
            self.log(f"server {index} back after {down.end - down.start:.1f}s")

    def _operator_requeue(self) -> None:
        """An operator's override: put one running job back in the queue."""
        rng = random.Random(f"requeue-{self.config.seed}-{len(self.requeues)}")
        for server in self.servers:
            if not server.running:
                continue
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError, KeyError):
                status, page = server.request("GET", "jobs?status=inProgress&limit=100", timeout=5)
                if status != 200 or not page["items"]:
                    return
                job = rng.choice(page["items"])
                at = time.time()
                status, _ = server.request(
                    "PUT", f"jobs/{job['id']}/status", {"status": "queued"}, timeout=5
                )
                if status == 202:
                    self.requeues.append((job["id"], at))
                    self.log(f"operator requeued job {job['id']}")
                return

    def _restart_db(self, fault: Fault) -> None:
        assert self.pg is not None
        down = _Down("postgres", time.time())
        self.downs.append(down)
        try:
            self.pg.restart(fault.detail or "fast")
        finally:
            down.end = time.time()
            self._db_busy = False
            self.log(f"postgres back after {down.end - down.start:.1f}s")

    # --- background work ---------------------------------------------------------------------
    def _enqueue_all(self) -> None:
        """Queue the jobs: a first batch at once, the rest spread over the fault phase."""
        cfg = self.config
        rng = random.Random(f"jobs-{cfg.seed}")
        times = arrival_times(rng, cfg)
        low, high = (leases * cfg.lease for leases in cfg.long_leases)
        for index, at in enumerate(times):
            # Short jobs fit in a lease; long ones need heartbeats to live through their work.
            long = rng.random() < cfg.long_jobs
            pause = rng.uniform(low, high) if long else rng.uniform(0.05, 1.5)
            while self._now() < at:
                time.sleep(0.05)
            self._enqueue(index, round(pause, 2))
        self._enqueue_done.set()

    def _enqueue(self, index: int, pause: float) -> None:
        body = {"jobAgentConfig": {"sleep": pause}, "metadata": {"chaosIndex": str(index)}}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for server in self.servers:
                if not server.running:
                    continue
                try:
                    status, job = server.request(
                        "POST", f"job-agents/{self.agent_id}/jobs", body, timeout=5
                    )
                except (OSError, http.client.HTTPException, ValueError):
                    continue
                if status == 201:
                    if isinstance(job, dict) and "id" in job:
                        self.sleeps[str(job["id"])] = pause
                    self._enqueued += 1
                    return
            time.sleep(0.2)
        raise RuntimeError(f"could not enqueue job {index} within 120 s")

    def _scrape(self, index: int, server: LiveServer) -> None:
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
            status, text = server.request("GET", "/metrics", api_key=None, timeout=2)
            if status == 200 and isinstance(text, str):
                self.metrics.record((index, server._starts), text)

    def _scrape_metrics(self) -> None:
        while not self._stop_scraper.wait(_METRICS_EVERY):
            for index, server in enumerate(self.servers):
                if server.running:
                    self._scrape(index, server)

    # --- the end -----------------------------------------------------------------------------
    def _settle(self) -> float | None:
        """Heal everything, then wait until every job is terminal; seconds it took."""
        cfg = self.config
        assert self.proxy is not None
        self.proxy.fault = None
        for thread in self._threads:
            if thread.name.startswith(("chaos-restart", "chaos-db")):
                thread.join(120)
        for agent in self.agents:
            if agent._stopped_groups or (agent.busy and agent.running()):
                agent.cont()
            if not agent.running():
                agent.start()
        self._enqueue_done.wait(180)
        begin = time.monotonic()
        deadline = begin + cfg.settle_timeout
        settled: float | None = None
        while time.monotonic() < deadline:
            self._watch_agents()
            jobs = self._jobs()
            if jobs is not None and len(jobs) >= self._enqueued:
                pending = [j for j in jobs.values() if j.get("status") not in TERMINAL]
                if not pending:
                    settled = time.monotonic() - begin
                    break
            time.sleep(0.3)
        self.log(f"settled: {settled}")
        self._drain_agents()
        self._reap_orphans()
        if settled is None:
            # Claims of agents we just stopped are legitimately held until their lease runs
            # out and a reaper runs: give them that long before calling anything "left".
            self._wait_for_claims_to_lapse()
        return settled

    def _drain_agents(self) -> None:
        """Ask every agent to finish its job and exit; an agent that does not is killed."""
        for agent in self.agents:
            agent.drain()
        drain_deadline = time.monotonic() + _DRAIN_TIMEOUT
        for agent in self.agents:
            if agent.proc is None:
                continue
            try:
                code = agent.proc.wait(max(0.1, drain_deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.agent_exits.append(f"agent {agent.slot} did not drain in {_DRAIN_TIMEOUT}s")
                agent.kill(with_job=True)
                continue
            if code != 0:
                self.agent_exits.append(
                    f"agent {agent.slot} drained with exit {code}: {agent.log_tail(3)}"
                )

    def _wait_for_claims_to_lapse(self) -> None:
        cfg = self.config
        deadline = time.monotonic() + cfg.lease + cfg.reap_interval + 5.0
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if not sql(self.database_url, "SELECT count(*) FROM job_claim")[0][0]:
                    return
            time.sleep(0.2)

    def _reap_orphans(self) -> None:
        """Jobs orphaned by a killed agent still run: wait for them, then kill them."""
        executions, _ = parse_executions(self.records_path.read_text(encoding="utf-8"))
        pids = {e.pid for e in executions if e.ended is None}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def _jobs(self) -> dict[str, dict[str, Any]] | None:
        """Every job of the run, from whichever server answers; None when none does."""
        for server in self.servers:
            if not server.running:
                continue
            jobs: dict[str, dict[str, Any]] = {}
            offset = 0
            try:
                while True:
                    status, page = server.request(
                        "GET", f"jobs?limit=1000&offset={offset}", timeout=10
                    )
                    if status != 200:
                        break
                    for job in page["items"]:
                        jobs[job["id"]] = job
                    offset += len(page["items"])
                    if not page["items"] or offset >= page["total"]:
                        return jobs
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                continue
        return None

    def _collect(self) -> Evidence:
        cfg = self.config
        self._stop_scraper.set()
        for index, server in enumerate(self.servers):
            if server.running:
                self._scrape(index, server)
        jobs = self._jobs() or {}
        server = next(s for s in self.servers if s.running)
        attempts: dict[str, list[dict[str, Any]]] = {}
        for job_id in jobs:
            status, rows = server.request("GET", f"jobs/{job_id}/attempts", timeout=10)
            attempts[job_id] = rows if status == 200 and isinstance(rows, list) else []
        claim_rows = int(sql(self.database_url, "SELECT count(*) FROM job_claim")[0][0])
        assert self.proxy is not None
        self.proxy.stop()
        self.proxy.dump(self.workdir / "exchanges.jsonl")
        records = self.records_path.read_text(encoding="utf-8")
        executions, bad = parse_executions(records)
        reports = []
        for agent in self.agents:
            with contextlib.suppress(OSError):
                for line in agent.report_path.read_text(encoding="utf-8").splitlines():
                    with contextlib.suppress(ValueError):
                        reports.append({**json.loads(line), "_slot": agent.slot})
        for label, count in self.proxy.applied.items():
            self.injected[label] += count
        return Evidence(
            lease_seconds=cfg.lease,
            reap_interval=cfg.reap_interval,
            jobs=jobs,
            attempts=attempts,
            claim_rows=claim_rows,
            executions=executions,
            exchanges=list(self.proxy.exchanges),
            reports=reports,
            metrics_rejections=self.metrics.totals(),
            metrics_complete=self.metrics.complete,
            outages=self._outages(),
            downs=[(d.start, d.end or time.time()) for d in self.downs],
            pauses=list(self.pauses),
            requeues=list(self.requeues),
            bad_records=bad,
            overlaps=parse_overlaps(records),
            kills=list(self.kills),
            freezes=list(self.freezes),
            watchdog=cfg.watchdog,
        )

    def _outages(self) -> list[tuple[float, float]]:
        """Intervals in which no reaper could run: the database down, or every server."""
        now = time.time()
        spans = [(d.start, d.end or now) for d in self.downs if d.what == "postgres"]
        per_server = [
            [(d.start, d.end or now) for d in self.downs if d.what == f"server{i}"]
            for i in range(len(self.servers))
        ]
        # Every server down at once: intersect the servers' down intervals.
        common = per_server[0]
        for other in per_server[1:]:
            common = [
                (max(a, c), min(b, d)) for a, b in common for c, d in other if max(a, c) < min(b, d)
            ]
        return spans + common

    def _teardown(self, *, keep: bool) -> None:
        self._stop_scraper.set()
        if self.proxy is not None:
            self.proxy.stop()
        for agent in self.agents:
            if agent.running():
                agent.cont()
                agent.kill(with_job=True)
        for server in reversed(self.servers):
            with contextlib.suppress(Exception):
                server.stop(timeout=15)
            server.kill()
        if self.pg is not None and self._dbname is not None:
            with contextlib.suppress(Exception):
                self.pg.drop_database(self._dbname)
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


# --- reporting -------------------------------------------------------------------------------


def _aggregate(name: str, values: list[Any]) -> str:
    """One cell summarising ``values`` of figure ``name`` over several runs."""
    present = [v for v in values if v not in ("n/a", None)]
    if not present:
        return "n/a"
    if name == "invariants":
        return "ok" if all(v == "ok" for v in present) else "VIOLATED"
    if name.startswith("worst") or name == "settled after faults (s)":
        numbers = [v for v in present if isinstance(v, int | float)]
        return str(max(numbers)) if len(numbers) == len(present) else "NO"
    if name.startswith("detection bound"):
        return str(present[0]) if len(set(present)) == 1 else ""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return str(sum(present))
    if name == "wall time (s)":
        return f"{sum(float(v) for v in present):.0f}"
    if all(isinstance(v, str) and v.lstrip("≥ ").isdigit() for v in present):
        bound = "≥ " if any(str(v).startswith("≥") for v in present) else ""
        return bound + str(sum(int(str(v).lstrip("≥ ")) for v in present))
    return ""


def figures_table(results: list[RunResult], *, by_mode: bool = False) -> str:
    """A Markdown table, one row per figure: a column per run and a total column, or with
    ``by_mode`` a column per database mode (its seeds summed) and the total."""
    return table_of([r.figures() for r in results], [r.config.db for r in results], by_mode)


def table_of(per_run: list[dict[str, Any]], modes_of_runs: list[str], by_mode: bool) -> str:
    """:func:`figures_table` from figures already computed (e.g. read back from ``--json``)."""
    names: list[str] = []
    for figures in per_run:
        names += [n for n in figures if n not in names and n != "run"]
    columns: list[tuple[str, list[dict[str, Any]]]] = []
    if by_mode:
        for mode in DB_MODES:
            group = [f for f, m in zip(per_run, modes_of_runs, strict=True) if m == mode]
            if group:
                columns.append((f"{mode} ({len(group)} runs)", group))
    else:
        columns = [(str(f["run"]), [f]) for f in per_run]
    if len(per_run) > 1:
        columns.append(("all runs", per_run))
    header = ["figure", *(title for title, _ in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        cells = []
        for _, group in columns:
            values = [f.get(name, "n/a") for f in group]
            cells.append(str(values[0]) if len(group) == 1 else _aggregate(name, values))
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


@contextlib.contextmanager
def private_postgres(needed: bool) -> Iterator[PgCluster | None]:
    if not needed:
        yield None
        return
    cluster = PgCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_many(
    seeds: list[int], modes: list[str], *, echo: Callable[[str], None], **overrides: Any
) -> list[RunResult]:
    results: list[RunResult] = []
    with private_postgres(any(m != "sqlite" for m in modes)) as pg:
        for seed in seeds:
            for mode in modes:
                config = ChaosConfig(seed=seed, db=mode, **overrides)
                echo(
                    f"chaos: {config.name}: {config.jobs} jobs, {config.agents} agents, "
                    f"{config.duration:.0f}s of faults"
                )
                result = ChaosRun(config, pg).run()
                results.append(result)
                echo(
                    f"chaos: {config.name}: {'ok' if result.ok else 'VIOLATED'} in "
                    f"{result.elapsed:.0f}s"
                )
                if not result.ok:
                    echo(result.check.summary())
                    echo(f"chaos: evidence kept in {result.workdir}")
                for exit_note in result.agent_exits:
                    echo(f"chaos: note: {exit_note}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.harness", description=__doc__)
    parser.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    parser.add_argument(
        "--seeds", type=int, default=None, help="how many seeds (default 1; 5 with --long)"
    )
    parser.add_argument("--db", choices=[*DB_MODES, "all"], default="all")
    parser.add_argument(
        "--jobs", type=int, default=None, help="jobs per run (default 30; 120 with --long)"
    )
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of faults per run (default 15; 60 with --long)",
    )
    parser.add_argument("--long", action="store_true", help="the long campaign (make chaos)")
    parser.add_argument(
        "--calm", action="store_true", help="no faults: the control run (zero re-runs expected)"
    )
    parser.add_argument(
        "--faults",
        default=None,
        help="comma-separated fault kinds to draw (default: all), e.g. agent_kill,agent_stop",
    )
    parser.add_argument(
        "--no-watchdog",
        action="store_true",
        help="agents run jobs without the watchdog (JOBAGENTCTL_WATCHDOG=0): the baseline",
    )
    parser.add_argument(
        "--slow-stop",
        type=float,
        default=0.0,
        help="seconds a job takes to exit after SIGTERM (default 0), e.g. with "
        "--faults operator_requeue",
    )
    parser.add_argument("--keep", action="store_true", help="keep every run's work dir")
    parser.add_argument("--verbose", "-v", action="store_true", help="narrate each fault")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    parser.add_argument(
        "--table-from", type=Path, default=None, help="print the tables of a --json file; no run"
    )
    args = parser.parse_args(argv)
    if args.table_from is not None:
        per_run = json.loads(args.table_from.read_text(encoding="utf-8"))
        modes = [str(f["run"]).split()[2] for f in per_run]
        print(table_of(per_run, modes, by_mode=False))
        print()
        print(table_of(per_run, modes, by_mode=True))
        return 0
    seeds = args.seeds or (5 if args.long else 1)
    modes = list(DB_MODES) if args.db == "all" else [args.db]
    overrides = {
        "jobs": args.jobs or (120 if args.long else 30),
        "agents": args.agents,
        "duration": args.duration or (60.0 if args.long else 15.0),
        "keep": args.keep,
        "verbose": args.verbose,
        "calm": args.calm,
        "watchdog": not args.no_watchdog,
        "slow_stop": args.slow_stop,
    }
    if args.faults:
        only = tuple(kind.strip() for kind in args.faults.split(",") if kind.strip())
        unknown = [kind for kind in only if kind not in KINDS]
        if unknown:
            parser.error(f"unknown fault kind(s): {', '.join(unknown)} (known: {', '.join(KINDS)})")
        overrides["only"] = only

    def echo(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    # SIGTERM unwinds like Ctrl-C: the runs' finally blocks stop their agents, orphaned jobs,
    # servers and private PostgreSQL instead of leaving them running.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    results = run_many(list(range(args.seed, args.seed + seeds)), modes, echo=echo, **overrides)
    print(figures_table(results))
    if seeds > 1:
        print()
        print(figures_table(results, by_mode=True))
    if args.json is not None:
        args.json.write_text(json.dumps([r.figures() for r in results], indent=2) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
