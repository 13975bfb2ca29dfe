"""System calls the server makes per claim+complete cycle: strace -c on the server process.

Usage: python -m benchmarks.syscalls [--jobs 500]   (needs strace, and ptrace rights)

Runs the ``ceilings`` API figure (one server, 2 load-generator processes × 4 agents,
PostgreSQL) with ``strace -c -f`` attached to the server, and prints each system call's count
per cycle. strace slows the server down; the counts do not depend on its speed.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import pgbench
from benchmarks.common import Server, postgres_database
from benchmarks.workers import Workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    args = parser.parse_args()
    with postgres_database() as url, Server(url) as server, tempfile.TemporaryDirectory() as tmp:
        pgbench.seed_queue(url, server.agent, args.jobs)
        out = Path(tmp) / "strace.txt"
        assert server.proc
        with Workers(
            "http", [server.url, server.path(""), server.api_key, server.agent], 2, 8
        ) as workers:
            argv = ["strace", "-c", "-f", "-o", str(out), "-p", str(server.proc.pid)]
            tracer = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # strace attaches to every thread before the load starts
            result = workers.go()
            tracer.send_signal(signal.SIGINT)
            tracer.wait(60)
        rows = []
        for line in out.read_text().splitlines():
            cells = line.split()
            if len(cells) >= 5 and cells[3].isdigit() and cells[-1] != "total":
                errors = int(cells[4]) if len(cells) == 6 else 0
                rows.append((cells[-1], int(cells[3]), errors))
    cycles = result.cycles
    print(f"{cycles} cycles; system calls of the server per cycle (2 requests)")
    print("| system call | per cycle | of which failed |")
    print("|---|---|---|")
    for name, calls, errors in sorted(rows, key=lambda r: -r[1]):
        print(f"| {name} | {calls / cycles:.2f} | {errors / cycles:.2f} |")
    print(f"| all | {sum(r[1] for r in rows) / cycles:.1f} | |")


if __name__ == "__main__":
    main()
