"""What `redact add` costs as values pile up, through a real `run` against a SQLite server.

The job hands `run` ``count`` values of ``size`` bytes one after another (the hand-over itself,
in the job's Python: socket round trip and `run` adding the value) and prints a 64 KiB line
between two adds, so the redactor searches what it holds. `jobagentctl redact add` itself (a
process start included) is timed for the first and the 60th value. At the end the job reads
`run`'s peak RSS (VmHWM) from /proc.

Usage: python -m benchmarks.redact_adds [--count 64] [--size 65536]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import Server, database, enqueue

__all__ = ["measure"]

# Runs inside the job: argv = count, size, where to write the figures.
_JOB = r"""
import json, os, subprocess, sys, time
from jobagentctl.supervisor.process.handover import hand_over
count, size, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
path, pid = os.environ["JOBAGENTCTL_REDACT_SOCKET"], int(os.environ["JOBAGENTCTL_RUN_PID"])
line = b"x" * 65535 + b"\n"
ms, cli_ms = [], {}
for index in range(1, count + 1):
    value = os.urandom(size // 2 + 1).hex().encode()[:size]
    if index in (1, 60):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jobagentctl", "redact", "add"], input=value,
                       check=True)
        cli_ms[index] = (time.perf_counter() - started) * 1000
    else:
        started = time.perf_counter()
        assert hand_over(path, value, run_pid=pid, timeout=600)
        ms.append((index, (time.perf_counter() - started) * 1000))
    sys.stdout.buffer.write(line)
    sys.stdout.flush()
status = open(f"/proc/{pid}/status").read()
hwm = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("VmHWM:"))
json.dump({"ms": ms, "cli_ms": cli_ms, "run_peak_rss_kib": hwm}, open(out, "w"))
"""


def measure(count: int = 64, size: int = 65536) -> dict[str, object]:
    with database("sqlite") as url, Server(url) as server, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(enqueue(server, 1))
        out = Path(tmp) / "figures.json"
        env = server.agent_env()
        job = [sys.executable, "-c", _JOB, str(count), str(size), str(out)]
        subprocess.run(
            [sys.executable, "-m", "jobagentctl", "run", "--", *job],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        figures: dict[str, Any] = json.loads(out.read_text())
    ms: dict[int, float] = dict(figures["ms"])
    cli_ms: dict[str, float] = figures["cli_ms"]
    return {
        "values": count,
        "value_bytes": size,
        "add_ms_2nd": round(ms.get(2, float("nan")), 1),
        "add_ms_59th": round(ms.get(59, float("nan")), 1),
        "add_ms_61st": round(ms.get(61, float("nan")), 1),
        "add_ms_last": round(ms[max(ms)], 1),
        "redact_add_cli_ms": {index: round(v, 1) for index, v in cli_ms.items()},
        "run_peak_rss_mib": round(figures["run_peak_rss_kib"] / 1024, 1),
        "values_mib": round(count * size / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--size", type=int, default=65536)
    args = parser.parse_args()
    print(json.dumps(measure(args.count, args.size), indent=2))


if __name__ == "__main__":
    main()
