"""The gateway against ctrlplane's REAL API server: the scenarios of tests/system/gateway, by hand.

Not part of the suite (it needs ctrlplane's server, brought up by ../shared/ctrlplane/up.sh).
It makes its own agent in ctrlplane (so other users of the seeded one are not disturbed), sets a
gateway up as an operator would (``server init --upstream-workspace``), and runs: a leased claim
with heartbeats that send nothing upstream and a fenced report; a SIGKILLed ``run`` whose job
ctrlplane gets back as queued and another ``run`` completes; a cancel made in ctrlplane stopping
``run`` (143); the gateway killed at a step and restarted; an outage (a TCP proxy between the
gateway and ctrlplane, stopped and started: ctrlplane itself is never stopped); a fleet running
every job exactly once; and the cost: claim + report cycles per second and upstream requests per
job, through the gateway and with the CLI straight against ctrlplane (V1).

    .venv/bin/python -m tools.gateway_trial --state /tmp/cp/run/state.json [--jobs 20]

ctrlplane's key is read from the state file and handed to the gateway through its environment;
it is never printed. Each scenario prints one line: its name, ok/FAILED, what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "jobagentctl"
CPSEED = Path("/work/shared/ctrlplane/cpseed.py")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http(
    method: str, url: str, key: str | None, body: Any = None, timeout: float = 30
) -> tuple[int, Any]:
    headers = {"Accept": "application/json"}
    if key:
        headers["X-API-Key"] = key
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with NO_PROXY.open(request, timeout=timeout) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_until(check: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Proxy:
    """A TCP forwarder 127.0.0.1:port → target, in a thread; ``stop()`` and ``start()`` again
    on the same port make an outage of whatever is behind it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        # Cancelled when the proxy stops: end quietly (asyncio's server calls exception() on
        # this task when it is done, which a cancelled task answers by raising).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def start(self) -> None:
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()

            async def main() -> None:
                self._server = await asyncio.start_server(
                    self._handle, "127.0.0.1", self.port, reuse_address=True
                )
                ready.set()
                await self._server.serve_forever()

            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(main())
            # The connections' tasks were cancelled with the server: let them end, then close
            # the loop (left pending, each was reported "destroyed" when collected).
            pending = asyncio.all_tasks(loop)
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        def close() -> None:
            server.close()
            for writer in self._writers:
                writer.close()
            self._writers.clear()
            for task in asyncio.all_tasks(loop):
                task.cancel()
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

        loop.call_soon_threadsafe(close)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = self._server = None


class Trial:
    def __init__(self, state_path: Path, jobs: int) -> None:
        self.state = json.loads(state_path.read_text())
        self.state_path = state_path
        self.key: str = self.state["apiKey"]  # never printed
        self.cp = "http://127.0.0.1:18300"
        self.ws: str = self.state["workspaceId"]
        self.jobs = jobs
        self.work = Path(tempfile.mkdtemp(prefix="gateway-trial-"))
        self.database = f"sqlite:///{self.work / 'gateway.db'}"
        self.proxy = Proxy(("127.0.0.1", 18300))
        self.proxy.start()
        self.port = free_port()
        self.gateway: subprocess.Popen[bytes] | None = None
        self.api_key = ""
        self.agent = str(uuid.uuid4())
        self.results: list[str] = []

    # --- ctrlplane ---------------------------------------------------------------------------
    def cp_call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(method, f"{self.cp}/api/v1/workspaces/{self.ws}{path}", self.key, body)

    def seed(self, n: int = 1) -> list[str]:
        out = []
        for _ in range(n):
            ran = subprocess.run(
                [sys.executable, str(CPSEED), "job", str(self.state_path), "--agent", self.agent],
                capture_output=True,
                text=True,
                check=True,
            )
            out.append(ran.stdout.strip().splitlines()[-1])
        return out

    def cp_status(self, job: str) -> str:
        status, body = self.cp_call("GET", f"/jobs/{job}")
        return str(body.get("status")) if status == 200 else f"http {status}"

    # --- the gateway -------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))
        }
        env.update(
            XDG_CONFIG_HOME=str(self.work / "config"),
            XDG_DATA_HOME=str(self.work / "data"),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def gateway_env(self, **extra: str) -> dict[str, str]:
        return self.env(
            JOBAGENTCTL_SERVER_DATABASE=self.database,
            JOBAGENTCTL_SERVER_PORT=str(self.port),
            JOBAGENTCTL_SERVER_UPSTREAM_URL=f"http://127.0.0.1:{self.proxy.port}",
            JOBAGENTCTL_SERVER_UPSTREAM_API_KEY=self.key,
            JOBAGENTCTL_SERVER_MIN_LEASE_SECONDS="1",
            JOBAGENTCTL_SERVER_REAP_INTERVAL="0.5",
            JOBAGENTCTL_SERVER_UPSTREAM_SYNC_INTERVAL="2",
            JOBAGENTCTL_SERVER_UPSTREAM_TIMEOUT="3",
            JOBAGENTCTL_SERVER_UPSTREAM_MAX_BACKOFF="2",
            JOBAGENTCTL_SERVER_KEY_CACHE_SECONDS="0",
            **extra,
        )

    def agent_env(self) -> dict[str, str]:
        return self.env(
            JOBAGENTCTL_URL=f"http://127.0.0.1:{self.port}",
            JOBAGENTCTL_WORKSPACE=self.ws,
            JOBAGENTCTL_API_KEY=self.api_key,
            JOBAGENTCTL_AGENT=self.agent,
        )

    def setup(self) -> None:
        status, _ = self.cp_call(
            "PUT",
            f"/job-agents/{self.agent}",
            {"name": "gateway-trial", "type": "http-pull", "config": {}},
        )
        assert status == 202, status
        ran = subprocess.run(
            [str(BIN), "server", "init", "-o", "json", "--upstream-workspace", "cp-test"],
            env=self.gateway_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        created = json.loads(ran.stdout)
        assert created["workspaceId"] == self.ws, created
        self.api_key = created["apiKey"]
        self.start_gateway()

    def start_gateway(self, **extra: str) -> None:
        log = (self.work / "gateway.log").open("ab")
        self.gateway = subprocess.Popen(
            [str(BIN), "server", "start"],
            env=self.gateway_env(**extra),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        wait_until(lambda: self.ready() or self.gateway.poll() is not None, "gateway ready")  # type: ignore[union-attr]

    def ready(self) -> bool:
        with contextlib.suppress(OSError):
            return http("GET", f"http://127.0.0.1:{self.port}/readyz", None, timeout=2)[0] == 200
        return False

    def stop_gateway(self) -> None:
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.send_signal(signal.SIGTERM)
            self.gateway.wait(30)

    def gw(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.port}/api/v1/workspaces/{self.ws}{path}"
        return http(method, url, self.api_key, body)

    def upstream_requests(self) -> float:
        _, text = http("GET", f"http://127.0.0.1:{self.port}/metrics", None)
        total = 0.0
        for line in str(text).splitlines():
            if line.startswith("jobagentctl_upstream_requests_total{"):
                total += float(line.split()[-1])
        return total

    def run(
        self, *command: str, lease: int = 3, extra: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                str(BIN),
                "run",
                "--lease-seconds",
                str(lease),
                "--wait",
                "60s",
                *extra,
                "--",
                *command,
            ],
            env=self.agent_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def note(self, name: str, ok: bool, detail: str) -> None:
        line = f"{name}: {'ok' if ok else 'FAILED'} - {detail}"
        self.results.append(line)
        print(line, flush=True)

    # --- scenarios ---------------------------------------------------------------------------
    def leased_claim(self) -> None:
        (job,) = self.seed()
        status, claimed = self.gw(
            "POST", f"/job-agents/{self.agent}/claim", {"leaseSeconds": 30, "waitSeconds": 10}
        )
        assert status == 200 and claimed["id"] == job, (status, claimed)
        before = self.upstream_requests()
        for _ in range(5):
            assert (
                self.gw("POST", f"/jobs/{job}/heartbeat", {"claimId": claimed["claimId"]})[0] == 200
            )
        sent_by_beats = self.upstream_requests() - before
        stale = self.gw(
            "PUT", f"/jobs/{job}/status", {"status": "successful", "claimId": str(uuid.uuid4())}
        )
        after_stale = self.cp_status(job)
        done = self.gw(
            "PUT", f"/jobs/{job}/status", {"status": "successful", "claimId": claimed["claimId"]}
        )
        final = self.cp_status(job)
        ok = (
            sent_by_beats == 0
            and stale[0] == 409
            and after_stale == "inProgress"
            and done[0] == 202
            and final == "successful"
        )
        self.note(
            "leased claim, heartbeats, fenced report",
            ok,
            f"attempt {claimed['attempt']}, lease {claimed['leaseSeconds']}s; 5 heartbeats sent "
            f"{sent_by_beats:.0f} requests upstream; stale claimId → {stale[0]} (ctrlplane "
            f"still {after_stale}); report → {done[0]}, ctrlplane {final}",
        )

    def sigkilled_agent(self) -> None:
        (job,) = self.seed()
        first = self.run("sleep", "300", lease=2)
        wait_until(lambda: self.cp_status(job) == "inProgress", "claimed in ctrlplane")
        killed = time.monotonic()
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        wait_until(lambda: self.cp_status(job) == "queued", "queued again in ctrlplane")
        requeued_after = time.monotonic() - killed
        second = self.run("true", lease=5)
        code = second.wait(90)
        attempts = self.gw("GET", f"/jobs/{job}/attempts")[1]
        outcomes = [(a["attempt"], a["outcome"]) for a in attempts]
        ok = (
            code == 0
            and self.cp_status(job) == "successful"
            and outcomes == [(1, "expired"), (2, "completed")]
        )
        self.note(
            "SIGKILLed agent",
            ok,
            f"queued again in ctrlplane {requeued_after:.1f}s after the kill (lease 2s); second "
            f"run exit {code}; ctrlplane {self.cp_status(job)}; attempts {outcomes}",
        )

    def cancel_upstream(self) -> None:
        (job,) = self.seed()
        proc = self.run("sleep", "300", lease=30)
        wait_until(lambda: self.cp_status(job) == "inProgress", "claimed in ctrlplane")
        time.sleep(0.5)
        status, _ = self.cp_call("PUT", f"/jobs/{job}/status", {"status": "cancelled"})
        cancelled = time.monotonic()
        code = proc.wait(90)
        self.note(
            "cancel made in ctrlplane",
            code == 143 and self.cp_status(job) == "cancelled",
            f"ctrlplane answered {status}; run exited {code} {time.monotonic() - cancelled:.1f}s "
            f"later (sync every 2s, a claim judged once {3 + 1}s old); ctrlplane "
            f"{self.cp_status(job)}",
        )

    def crash_and_reconcile(self) -> None:
        (job,) = self.seed()
        self.stop_gateway()
        self.start_gateway(JOBAGENTCTL_SERVER_GATEWAY_CRASH_AT="claimed-upstream")
        with contextlib.suppress(OSError):
            self.gw(
                "POST", f"/job-agents/{self.agent}/claim", {"leaseSeconds": 2, "waitSeconds": 10}
            )
        assert self.gateway is not None
        code = self.gateway.wait(30)
        left = self.cp_status(job)
        restarted = time.monotonic()
        self.start_gateway()
        wait_until(lambda: self.cp_status(job) == "queued", "queued again after the restart")
        back = time.monotonic() - restarted
        proc = self.run("true", lease=5)
        done = proc.wait(90)
        self.note(
            "gateway killed between ctrlplane's claim and the answer",
            code == 137 and done == 0 and self.cp_status(job) == "successful",
            f"exit {code}, ctrlplane left {left}; after the restart queued again in {back:.1f}s, "
            f"then run exit {done}, ctrlplane {self.cp_status(job)}",
        )

    def outage(self) -> None:
        (job,) = self.seed()
        status, claimed = self.gw(
            "POST", f"/job-agents/{self.agent}/claim", {"leaseSeconds": 5, "waitSeconds": 10}
        )
        assert status == 200, claimed
        self.proxy.stop()
        beat = self.gw("POST", f"/jobs/{job}/heartbeat", {"claimId": claimed["claimId"]})[0]
        report = self.gw(
            "PUT", f"/jobs/{job}/status", {"status": "successful", "claimId": claimed["claimId"]}
        )
        ready = http("GET", f"http://127.0.0.1:{self.port}/readyz", None)[1]
        time.sleep(8)  # longer than the lease: a delivering claim is not reaped
        claims = self.gw("GET", "/job-claims")[1]["items"]
        held = [c.get("delivery") for c in claims if c["jobId"] == job]
        during = self.cp_status(job)
        self.proxy.start()
        wait_until(lambda: self.cp_status(job) == "successful", "delivered after the outage")
        self.note(
            "ctrlplane unreachable while a job runs and reports",
            beat == 200 and report[0] == 202 and held == ["pending"] and during == "inProgress",
            f"heartbeat {beat}, report {report[0]} ({report[1].get('message')}), readyz "
            f"{ready}, claim held {held} 8s past its 5s lease; delivered once back",
        )

    def fleet(self) -> None:
        jobs = self.seed(self.jobs)
        ran = self.work / "ran.txt"
        script = f'echo "$JOBAGENTCTL_JOB_ID" >> {ran}'
        began = time.monotonic()
        procs = [
            self.run("sh", "-c", script, lease=10, extra=("--loop", "--idle-timeout", "5s"))
            for _ in range(3)
        ]
        wait_until(lambda: all(self.cp_status(j) == "successful" for j in jobs), "fleet done", 300)
        elapsed = time.monotonic() - began
        for proc in procs:
            proc.wait(60)
        runs = Counter(ran.read_text().split())
        ok = set(runs) == set(jobs) and set(runs.values()) == {1}
        self.note(
            "fleet exactly once",
            ok,
            f"{len(jobs)} jobs, 3 run --loop, {elapsed:.1f}s, runs per job {set(runs.values())}",
        )

    def cost(self) -> None:
        """The same client (``run --loop -- true``) through the gateway and straight against
        ctrlplane (V1): jobs per second, gateway CPU per job, upstream requests per job."""
        n = self.jobs
        jobs = self.seed(n)
        assert self.gateway is not None
        cpu0 = _cpu(self.gateway.pid)
        req0 = self.upstream_requests()
        began = time.monotonic()
        proc = self.run(
            "true", lease=30, extra=("--loop", "--max-jobs", str(n), "--idle-timeout", "10s")
        )
        proc.wait(300)
        gateway_rate = n / (time.monotonic() - began)
        cpu = (_cpu(self.gateway.pid) - cpu0) / n
        per_job = (self.upstream_requests() - req0) / n
        assert all(self.cp_status(j) == "successful" for j in jobs)
        jobs = self.seed(n)
        began = time.monotonic()
        direct = subprocess.run(
            [
                str(BIN),
                "run",
                "--loop",
                "--max-jobs",
                str(n),
                "--idle-timeout",
                "10s",
                "--",
                "true",
            ],
            env=self.env(
                CTRLPLANE_URL=self.cp,
                CTRLPLANE_API_KEY=self.key,
                CTRLPLANE_WORKSPACE="cp-test",
                JOBAGENTCTL_AGENT=self.agent,
            ),
            capture_output=True,
            check=False,
        )
        direct_rate = n / (time.monotonic() - began)
        self.note(
            "cost",
            True,
            f"{n} jobs: gateway {gateway_rate:.2f} jobs/s, {cpu * 1000:.1f} ms gateway CPU/job, "
            f"{per_job:.2f} upstream requests/job; V1 straight to ctrlplane {direct_rate:.2f} "
            f"jobs/s (exit {direct.returncode}, unleased)",
        )

    def close(self) -> None:
        self.stop_gateway()
        self.proxy.stop()
        with contextlib.suppress(Exception):
            self.cp_call("DELETE", f"/job-agents/{self.agent}")
        shutil.rmtree(self.work, ignore_errors=True)


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, default=Path("/tmp/cp/run/state.json"))
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--only", help="run this scenario alone (a method name, e.g. cost)")
    args = parser.parse_args()
    trial = Trial(args.state, args.jobs)
    failed = False
    try:
        trial.setup()
        scenarios = [
            trial.leased_claim,
            trial.sigkilled_agent,
            trial.cancel_upstream,
            trial.crash_and_reconcile,
            trial.outage,
            trial.fleet,
            trial.cost,
        ]
        if args.only:
            scenarios = [getattr(trial, args.only)]
        for scenario in scenarios:
            try:
                scenario()
            except Exception as exc:  # one scenario's failure is reported, the rest still run
                failed = True
                trial.note(scenario.__name__, False, f"{type(exc).__name__}: {exc}")
    finally:
        trial.close()
    return 1 if failed or any("FAILED" in line for line in trial.results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
