"""What `run` costs while its command is quiet: shipping on (the default) and the output
watchdog on (``--no-output-timeout``), the child a ``sleep``.

Usage: python -m benchmarks.quiet_run [--short 10] [--long 40]

Two runs against one SQLite server, ``sleep SHORT`` and ``sleep LONG``, each `run`'s own CPU
(user + system, from ``wait4``: its children's are not included). The steady share of a core is
the difference of the two CPU times over the difference of their wall times: start-up (imports,
claim, report) is the same in both and cancels out. The whole-run share (start-up included) is
printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

from benchmarks.common import Server, database, enqueue
from benchmarks.figures import Row, verdict

__all__ = ["main", "quiet_run", "section"]


def _one(server: Server, seconds: float) -> tuple[float, float]:
    """CPU seconds and wall seconds of one `run` around ``sleep seconds``."""
    asyncio.run(enqueue(server, 1, concurrency=1))
    env = server.agent_env()
    argv = [sys.executable, "-m", "jobagentctl", "run", "--lease-seconds", "15"]
    argv += ["--no-output-timeout", "1h", "--", "sleep", str(seconds)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"run exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime, wall


def quiet_run(short: float, long: float) -> tuple[float, float, float]:
    """Steady share of a core (%), whole-run share of the long run (%), and its CPU seconds."""
    with database("sqlite") as url, Server(url) as server:
        cpu_short, wall_short = _one(server, short)
        cpu_long, wall_long = _one(server, long)
    steady = (cpu_long - cpu_short) / (wall_long - wall_short) * 100
    return steady, cpu_long / wall_long * 100, cpu_long


def section(mode: str) -> list[Row]:
    """``make bench`` section ``quiet_run``: a difference of a few seconds of wall time is
    noise on a busy machine (the smoke run's share can even come out negative), hence 13 s."""
    short, long = {"full": (10.0, 60.0), "quick": (5.0, 30.0), "smoke": (2.0, 15.0)}[mode]
    steady, whole, _ = quiet_run(short, long)
    return [
        Row(
            f"`run` around a quiet command, shipping and watchdog on: steady share "
            f"(whole {long:g} s run {whole:.2f} %)",
            f"{steady:.2f} % of a core",
            "one core",
            f"{steady / 100:.4f}×",
            "≤ 1 %",
            verdict(steady <= 1.0),
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quiet_run", description=__doc__)
    parser.add_argument("--short", type=float, default=10.0)
    parser.add_argument("--long", type=float, default=40.0)
    args = parser.parse_args(argv)
    steady, whole, cpu = quiet_run(args.short, args.long)
    print(
        f"run around a quiet command (shipping and watchdog on): steady {steady:.2f} % of a "
        f"core; whole run of {args.long:g} s {whole:.2f} % ({cpu:.2f} s CPU)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
