"""What shipping output costs `run`: a command printing as fast as it can, shipping on vs off.

Rounds alternate the two (on, off, on, off, …) against one SQLite server; the figures are
medians. Also the server's peak RSS over the whole section and the size and shape of the log
stored for the last shipped job (the cap keeps the head, one truncation marker, the newest),
and the command's own wall time (what shipping costs the command itself, not `run`'s report).

``python -m benchmarks.shipping [MB] [ROUNDS]`` (issue 35): 10 MB by default, against a server
whose log cap (16 MiB) is above it, so that everything printed may be stored.
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import Server, database, enqueue

__all__ = ["ShipFigures", "output_cost"]


@dataclass(frozen=True)
class ShipFigures:
    """Medians of the wall time of `run` with and without shipping; the server's peak RSS
    (MB); the stored log of the last shipped job: its bytes, chunks and markers."""

    printed: int
    on_seconds: float
    on_command: float  # the command's own wall time (it times itself), shipping on
    off_command: float
    off_seconds: float
    on_cpu: float  # CPU seconds of `run` and everything it waited for (the command)
    off_cpu: float
    server_rss_mb: float
    stored_bytes: int
    chunks: int
    markers: list[str]


def _run(server: Server, printed: int, ship: bool, report: Path) -> tuple[float, float, float]:
    env = server.agent_env()
    argv = [sys.executable, "-m", "jobagentctl", "run", "--report", str(report)]
    argv += [] if ship else ["--no-ship-output"]
    timing = report.with_name("command-ns")
    command = f"head -c {printed} /dev/zero | tr '\\0' x"
    script = f"s=$(date +%s%N); {command}; e=$(date +%s%N); echo $((e - s)) > {timing}"
    argv += ["--", "sh", "-c", script]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"run exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, int(timing.read_text()) / 1e9


def _stored(server: Server, job_id: str) -> tuple[int, int, list[str]]:
    """Bytes and chunks of the job's latest attempt's log, and its markers' text."""
    size = chunks = 0
    markers: list[str] = []
    after = 0
    while True:
        status, body = asyncio.run(server.call("GET", f"/jobs/{job_id}/logs?after={after}"))
        if status != 200:
            raise RuntimeError(f"reading the log: {status} {body[:200]!r}")
        page = json.loads(body)
        if not page["chunks"]:
            return size, chunks, markers
        for chunk in page["chunks"]:
            data = base64.b64decode(chunk["data"])
            chunks += 1
            if chunk["stream"] == "marker":
                markers.append(data.decode(errors="replace").strip())
            else:
                size += len(data)
        after = page["chunks"][-1]["seq"]


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def output_cost(printed: int, rounds: int, log_max_bytes: int | None = None) -> ShipFigures:
    """``rounds`` runs each way of a command printing ``printed`` bytes of ``x`` (against a
    server with that log cap, if given)."""
    on: list[tuple[float, float, float]] = []
    off: list[tuple[float, float, float]] = []
    settings = {} if log_max_bytes is None else {"log_max_bytes": str(log_max_bytes)}
    with (
        database("sqlite") as url,
        Server(url, settings=settings) as server,
        tempfile.TemporaryDirectory(prefix="jab-ship-") as tmp,
    ):
        asyncio.run(enqueue(server, 2 * rounds, concurrency=1))
        report = Path(tmp) / "report.json"
        last_job = ""
        for _ in range(rounds):
            on.append(_run(server, printed, True, report))
            last_job = json.loads(report.read_text())["jobId"]
            off.append(_run(server, printed, False, report))
        assert server.proc is not None
        rss = _peak_rss_mb(server.proc.pid)
        stored, chunks, markers = _stored(server, last_job)
    return ShipFigures(
        printed=printed,
        on_seconds=statistics.median(wall for wall, _, _ in on),
        off_seconds=statistics.median(wall for wall, _, _ in off),
        on_command=statistics.median(command for _, _, command in on),
        off_command=statistics.median(command for _, _, command in off),
        on_cpu=statistics.median(cpu for _, cpu, _ in on),
        off_cpu=statistics.median(cpu for _, cpu, _ in off),
        server_rss_mb=rss,
        stored_bytes=stored,
        chunks=chunks,
        markers=markers,
    )


def main() -> None:
    """Print the figures for ``[MB] [ROUNDS]`` (10, 3) against a 16 MiB log cap."""
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    got = output_cost(mb * 1_000_000, rounds, log_max_bytes=16 * 1024 * 1024)
    print(
        f"{mb} MB printed: stored/printed {got.stored_bytes / got.printed:.3f} "
        f"({got.chunks} chunks, markers {got.markers}); "
        f"run wall {got.on_seconds:.2f} s vs {got.off_seconds:.2f} s "
        f"({got.on_seconds / got.off_seconds:.2f}x); "
        f"command wall {got.on_command:.2f} s vs {got.off_command:.2f} s "
        f"({got.on_command / got.off_command:.2f}x); "
        f"CPU {got.on_cpu:.2f} s vs {got.off_cpu:.2f} s"
    )


if __name__ == "__main__":
    main()
