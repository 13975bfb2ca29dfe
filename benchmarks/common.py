"""Shared plumbing for the benchmarks: databases, a real server process, CPU accounting.

Everything measured runs as real processes on this machine; CPU figures come from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.httpclient import Connection

PG_URL = os.environ.get(
    "JOBAGENTCTL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Every database this benchmark run creates carries this tag, so the load gate can tell our
# PostgreSQL backends from those of anyone else's run (tests use other names).
RUN_TAG = f"r{os.getpid()}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """Time on a CPU of one live process, all threads (/proc/PID/schedstat: nanoseconds)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


class BackendCpu:
    """CPU of the PostgreSQL backends connected to one database (by PID, from
    pg_stat_activity): every benchmark run has a database of its own, so these are exactly the
    run's connections, not other clients' and not PostgreSQL's background processes.

    A backend that connects during the run counts from zero; one that disconnects before
    ``seconds()`` is lost (the clients measured here keep their connections open until then).
    """

    def __init__(self, url: str) -> None:
        self._db = database_name(url)
        self._start = self.snapshot()

    def pids(self) -> list[int]:
        out = psql(
            PG_URL,
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
            f"AND datname = '{self._db}'",
        )
        return [int(x) for x in out.split()]

    def snapshot(self) -> dict[int, float]:
        return {pid: proc_cpu_seconds(pid) for pid in self.pids()}

    def seconds(self) -> float:
        end = self.snapshot()
        return sum(max(0.0, v - self._start.get(pid, 0.0)) for pid, v in end.items())


def _postgres_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("postgres"):
            pids.append(int(entry.name))
    return pids


class PostgresCpu:
    """CPU spent by PostgreSQL processes between ``__init__`` and ``seconds()``.

    Per process, so backends of other clients that exit meanwhile do not make the figure
    negative; a backend that starts meanwhile counts from zero.
    """

    def __init__(self) -> None:
        self._start = {pid: proc_cpu_seconds(pid) for pid in _postgres_pids()}

    def seconds(self) -> float:
        total = 0.0
        for pid in _postgres_pids():
            now = proc_cpu_seconds(pid)
            total += max(0.0, now - self._start.get(pid, 0.0))
        return total


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def psql(url: str, sql: str) -> str:
    out = subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-qtAc", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@contextlib.contextmanager
def postgres_database(prefix: str = "jab") -> Iterator[str]:
    name = f"{prefix}_{RUN_TAG}_{uuid.uuid4().hex[:10]}"
    psql(PG_URL, f"CREATE DATABASE {name}")
    try:
        yield with_database(PG_URL, name)
    finally:
        psql(PG_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "postgres":
        with postgres_database() as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="jab-") as tmp:
            yield f"sqlite:///{tmp}/bench.db"


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "jobagentctl", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return out.stdout


def wait_for_port(proc: subprocess.Popen[bytes], port: int) -> None:
    """Wait until a server process ``proc`` accepts connections on ``port`` (30 s at most)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=0.2),
        ):
            return
        if proc.poll() is not None:
            raise RuntimeError("server exited at start")
        time.sleep(0.05)
    raise RuntimeError("server did not start")


@dataclass
class Server:
    """A real `jobagentctl server start` process with a workspace, a key and one agent."""

    database_url: str
    settings: dict[str, str] = field(default_factory=dict)
    url: str = ""
    workspace: str = ""
    api_key: str = ""
    agent: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        init = json.loads(cli("server", "init", "--database", self.database_url, "-o", "json"))
        self.workspace, self.api_key = init["workspaceId"], init["apiKey"]
        self._spawn()
        self.agent = str(uuid.uuid4())
        status, _ = asyncio.run(
            self.call("PUT", f"/job-agents/{self.agent}", {"name": "bench", "type": "bench"})
        )
        if status != 202:
            raise RuntimeError(f"agent registration failed: {status}")
        return self

    def start_more(self, first: Server) -> Server:
        """Another server process on ``first``'s database, workspace, key and agent."""
        self.workspace, self.api_key, self.agent = first.workspace, first.api_key, first.agent
        self._spawn()
        return self

    def _spawn(self) -> None:
        port = free_port()
        env = {
            **os.environ,
            "JOBAGENTCTL_SERVER_DATABASE": self.database_url,
            "JOBAGENTCTL_SERVER_PORT": str(port),
            "JOBAGENTCTL_SERVER_HOST": "127.0.0.1",
            **{f"JOBAGENTCTL_SERVER_{k.upper()}": v for k, v in self.settings.items()},
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobagentctl", "server", "start"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        scheme = "https" if "tls_cert" in self.settings else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        wait_for_port(self.proc, port)

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}

    def agent_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (this process's environment by default) with what `run` needs to reach
        this server as its agent."""
        return {
            **(os.environ if base is None else base),
            "JOBAGENTCTL_URL": self.url,
            "JOBAGENTCTL_WORKSPACE": self.workspace,
            "JOBAGENTCTL_AGENT": self.agent,
            "JOBAGENTCTL_API_KEY": self.api_key,
        }

    def path(self, rest: str) -> str:
        return f"/api/v1/workspaces/{self.workspace}{rest}"

    async def metric(self, name: str) -> float:
        """The value of an unlabelled metric on ``/metrics``; 0 when it is not there."""
        conn = await Connection.open(self.url)
        try:
            _, raw = await conn.request("GET", "/metrics")
        finally:
            await conn.close()
        for line in raw.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    async def call(self, method: str, rest: str, body: Any = None) -> tuple[int, bytes]:
        conn = await Connection.open(self.url)
        try:
            return await conn.request(method, self.path(rest), body=body, headers=self.headers)
        finally:
            await conn.close()

    def cpu(self) -> float:
        return proc_cpu_seconds(self.proc.pid) if self.proc else 0.0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def post_job(
    conn: Connection, server: Server, agent: str | None = None, body: Any = None
) -> bytes:
    """Create one job for ``agent`` (the server's by default); the response body."""
    status, raw = await conn.request(
        "POST",
        server.path(f"/job-agents/{agent or server.agent}/jobs"),
        body={"jobAgentConfig": {}} if body is None else body,
        headers=server.headers,
    )
    if status != 201:
        raise RuntimeError(f"enqueue failed: {status} {raw[:200]!r}")
    return raw


async def enqueue(server: Server, count: int, concurrency: int = 8) -> None:
    """Queue ``count`` no-op jobs through the API (not timed)."""
    left = count

    async def worker() -> None:
        nonlocal left
        conn = await Connection.open(server.url)
        try:
            while left > 0:
                left -= 1
                await post_job(conn, server)
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]
