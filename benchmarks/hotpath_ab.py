"""The HTTP core A/B: the same app under uvicorn + httptools and under granian, CPU per request.

Usage: python -m benchmarks.hotpath_ab [--rounds 3] [--jobs 3000] [--variants uvicorn,granian]
(the granian variant needs ``pip install granian``: it is measured here, not a dependency;
a variant ``git:REV`` is ``server start`` of the source at git revision REV, for an A/B of a
change to the code: ``--variants git:main,uvicorn``)

Each round runs every variant once, in a new order each round, on a database of its own
seeded with ``--jobs`` queued jobs; 2 load-generator processes × 4 agents loop claim →
complete (the ``ceilings`` API figure) until the queue is empty. The figure is the server's CPU
per request (every thread of the server process and of its children, from /proc, so granian's
worker process and its Rust threads count), which a busy machine does not skew the way it
skews a rate; the rate is printed beside it. Medians over the rounds, ratio to the first variant.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import pgbench
from benchmarks.common import Server, free_port, postgres_database, wait_for_port
from benchmarks.workers import Workers


def _task_cpu(pid: int) -> float:
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return total


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def tree_cpu(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` and of its descendants (alive now)."""
    return _task_cpu(pid) + sum(tree_cpu(kid) for kid in _children(pid))


class GranianServer(Server):
    """The same app (``create_app`` from the same settings) served by granian: one worker
    process, one runtime thread, uvloop, HTTP/1 only — the closest match to ``server start``."""

    extra: tuple[str, ...] = ()

    def _spawn(self) -> None:
        port = free_port()
        env = {
            **os.environ,
            "JOBAGENTCTL_SERVER_DATABASE": self.database_url,
            "JOBAGENTCTL_SERVER_LOG_LEVEL": "warning",
        }
        argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        argv += ["--runtime-threads", "1", "--loop", "uvloop", "--http", "1", "--no-ws"]
        argv += [*self.extra, "--log-level", "warning", "jobagentctl.server.http.app:create_app"]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.url = f"http://127.0.0.1:{port}"
        wait_for_port(self.proc, port)


class SourceServer(Server):
    """``server start`` of another copy of the source (``PYTHONPATH`` goes before the
    editable install of this tree)."""

    src = ""

    def _spawn(self) -> None:
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = self.src
        try:
            super()._spawn()
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved


def export_source(rev: str, into: str) -> str:
    """The ``src`` directory of git revision ``rev``, written under ``into``."""
    archive = subprocess.run(["git", "archive", rev, "src"], check=True, capture_output=True)
    os.makedirs(into)
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return str(Path(into) / "src")


class GranianRustTasks(GranianServer):
    """granian with its Rust task implementation and single-threaded runtime: its fastest
    settings for one worker."""

    extra = ("--task-impl", "rust", "--runtime-mode", "st")


VARIANTS: dict[str, type[Server]] = {
    "uvicorn": Server,
    "granian": GranianServer,
    "granian-rust-tasks": GranianRustTasks,
}


def _server(variant: str, url: str, sources: dict[str, str]) -> Server:
    if variant in sources:
        server = SourceServer(url)
        server.src = sources[variant]
        return server
    return VARIANTS[variant](url)


def one_run(variant: str, jobs: int, sources: dict[str, str]) -> tuple[float, float]:
    """(server CPU ms per request, cycles/s) of one run of ``variant``."""
    with postgres_database() as url, _server(variant, url, sources) as server:
        pgbench.seed_queue(url, server.agent, jobs)
        assert server.proc
        args = [server.url, server.path(""), server.api_key, server.agent]
        with Workers("http", args, 2, 8) as workers:
            cpu0 = tree_cpu(server.proc.pid)
            result = workers.go()
            cpu = tree_cpu(server.proc.pid) - cpu0
        return 1000 * cpu / (2 * result.cycles), result.rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--variants", default="uvicorn,granian")
    args = parser.parse_args()
    names = args.variants.split(",")
    tmp = tempfile.mkdtemp(prefix="hotpath-ab-")
    revs = [n for n in names if n.startswith("git:")]
    sources = {n: export_source(n[4:], f"{tmp}/{i}") for i, n in enumerate(revs)}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    rate: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = random.sample(names, len(names))
        for name in order:
            ms, per_s = one_run(name, args.jobs, sources)
            cpu[name].append(ms)
            rate[name].append(per_s)
            print(f"round {r + 1} {name}: {ms:.3f} ms CPU/request, {per_s:,.0f} cycles/s")
    base = statistics.median(cpu[names[0]])
    print("| HTTP core | server CPU per request (median) | ratio | cycles/s (median) |")
    print("|---|---|---|---|")
    for name in names:
        mid = statistics.median(cpu[name])
        per_s = statistics.median(rate[name])
        print(f"| {name} | {mid:.3f} ms | {mid / base:.2f}× | {per_s:,.0f} |")


if __name__ == "__main__":
    main()
