"""What shipping output costs `run`: a command printing as fast as it can, shipping on vs off.

Rounds alternate the two (on, off, on, off, …) against one SQLite server; the figures are
medians. Also the server's peak RSS over the whole section and the size and shape of the log
stored for the last shipped job (the cap keeps the head, one truncation marker, the newest).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
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
    off_seconds: float
    on_cpu: float  # CPU seconds of `run` and everything it waited for (the command)
    off_cpu: float
    server_rss_mb: float
    stored_bytes: int
    chunks: int
    markers: list[str]


def _run(server: Server, printed: int, ship: bool, report: Path) -> tuple[float, float]:
    env = {
        **os.environ,
        "JOBAGENTCTL_URL": server.url,
        "JOBAGENTCTL_WORKSPACE": server.workspace,
        "JOBAGENTCTL_AGENT": server.agent,
        "JOBAGENTCTL_API_KEY": server.api_key,
    }
    argv = [sys.executable, "-m", "jobagentctl", "run", "--report", str(report)]
    argv += [] if ship else ["--no-ship-output"]
    argv += ["--", "sh", "-c", f"head -c {printed} /dev/zero | tr '\\0' x"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"run exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


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


def output_cost(printed: int, rounds: int) -> ShipFigures:
    """``rounds`` runs each way of a command printing ``printed`` bytes of ``x``."""
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    with (
        database("sqlite") as url,
        Server(url) as server,
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
        on_seconds=statistics.median(wall for wall, _ in on),
        off_seconds=statistics.median(wall for wall, _ in off),
        on_cpu=statistics.median(cpu for _, cpu in on),
        off_cpu=statistics.median(cpu for _, cpu in off),
        server_rss_mb=rss,
        stored_bytes=stored,
        chunks=chunks,
        markers=markers,
    )
