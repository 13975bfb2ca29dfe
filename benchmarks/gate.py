"""The load gate: is the machine quiet enough for a figure to mean anything?

The development machine is shared (2 cores, several people's test suites). Before each
measured run the gate samples `/proc/stat` and waits (up to a bound) until the machine is idle;
during the run it counts the CPU that processes *not ours* spent (total busy CPU minus the
processes the benchmark started and PostgreSQL's own auxiliary processes). A figure whose gate
failed is printed with a `busy` mark; docs/benchmarks.md records only figures whose gate passed.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1

# Gate thresholds, in cores (of CORES): before a run the machine must be this idle, and during
# it other people's processes may use at most this much CPU.
IDLE_BEFORE_CORES = float(os.environ.get("BENCH_GATE_BUSY_BEFORE", "0.25"))
FOREIGN_DURING_CORES = float(os.environ.get("BENCH_GATE_FOREIGN_DURING", "0.25"))
_AUX = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum",
    "logical replication",
    "stats collector",
    "archiver",
)


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return total - idle, total


def busy_cores(seconds: float) -> float:
    """Average busy cores of the whole machine over ``seconds``."""
    b0, t0 = machine_ticks()
    time.sleep(seconds)
    b1, t1 = machine_ticks()
    return CORES * (b1 - b0) / max(1, t1 - t0)


def proc_cpu(pid: int) -> float:
    """Time on a CPU of one live process (/proc/PID/schedstat, nanoseconds)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def postgres_aux_pids() -> list[int]:
    """PostgreSQL's own background processes (WAL writer, checkpointer, autovacuum, …)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("postgres: ") and any(a in cmd for a in _AUX):
            pids.append(int(entry.name))
    return pids


def descendants(root: int) -> list[int]:
    """Live descendants of ``root`` (from each process's parent in /proc/PID/stat)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    out: list[int] = []
    frontier = [root]
    while frontier:
        kids = [c for c, p in parent.items() if p == frontier[-1]]
        frontier.pop()
        out.extend(kids)
        frontier.extend(kids)
    return out


def _our_backends() -> list[int]:
    """PostgreSQL backends connected to this run's databases (named with RUN_TAG)."""
    from benchmarks.common import PG_URL, RUN_TAG

    try:
        out = subprocess.run(
            [
                "psql",
                PG_URL,
                "-qtAc",
                f"SELECT pid FROM pg_stat_activity WHERE datname LIKE '%\\_{RUN_TAG}\\_%'",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(x) for x in out.split()]


@dataclass
class Gate:
    """One measured run's gate: machine load before it and other people's CPU during it."""

    busy_before: float = 0.0
    waited: float = 0.0
    foreign_during: float = 0.0
    seconds: float = 0.0
    _b0: int = 0
    _t0: int = 0
    _wall0: float = 0.0
    _ours0: dict[int, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.busy_before <= IDLE_BEFORE_CORES and self.foreign_during <= FOREIGN_DURING_CORES

    def describe(self) -> str:
        state = "quiet" if self.passed else "BUSY"
        return (
            f"{state}: {self.busy_before:.2f} cores busy before, others "
            f"{self.foreign_during:.2f} cores during"
        )


def wait_quiet(max_wait: float, sample: float = 1.0) -> Gate:
    """Sample machine load until it is under the gate or ``max_wait`` runs out."""
    started = time.monotonic()
    while True:
        busy = busy_cores(sample)
        if busy <= IDLE_BEFORE_CORES or time.monotonic() - started >= max_wait:
            return Gate(busy_before=busy, waited=time.monotonic() - started)


class Measured:
    """Counts the machine's busy CPU during a block, and how much of it was ours.

    ``ours`` is called at the start and at the end and returns {pid: cpu seconds} for the live
    processes of the run that are not our descendants (its PostgreSQL backends); this process,
    its live descendants and its reaped children, and PostgreSQL's auxiliary processes (they
    serve every client, ours included), count as ours too. ``add_ours`` charges CPU counted
    otherwise (the backends of a pgbench run, which exit inside the block). Everything else is
    others' work.
    """

    def __init__(self, gate: Gate, ours: Callable[[], dict[int, float]]) -> None:
        self.gate = gate
        self._ours = ours
        self._total = 0.0
        self._mine = 0.0

    def _snapshot(self) -> dict[int, float]:
        snap = dict(self._ours())
        for pid in [*postgres_aux_pids(), *descendants(os.getpid()), *_our_backends()]:
            snap.setdefault(pid, proc_cpu(pid))
        t = os.times()
        snap[-1] = t.user + t.system + t.children_user + t.children_system
        return snap

    def __enter__(self) -> Measured:
        self._start = self._snapshot()
        self._b0, self._t0 = machine_ticks()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        b1, t1 = machine_ticks()
        end = self._snapshot()
        wall = time.perf_counter() - self._wall
        self._total = CORES * (b1 - self._b0) / max(1, t1 - self._t0) * wall
        self._mine = sum(max(0.0, v - self._start.get(pid, 0.0)) for pid, v in end.items())
        self.gate.seconds = wall
        self._update()

    def add_ours(self, seconds: float) -> None:
        self._mine += seconds
        self._update()

    def _update(self) -> None:
        wall = self.gate.seconds
        if wall < 0.5:
            # /proc/stat counts in 10 ms ticks: a shorter block cannot be split into ours and
            # others'; such a figure is gated on the load before it only.
            self.gate.foreign_during = 0.0
            return
        self.gate.foreign_during = max(0.0, self._total - self._mine) / wall


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    return {pid: proc_cpu(pid) for pid in pids}
