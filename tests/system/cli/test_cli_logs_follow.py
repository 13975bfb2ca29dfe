"""`jobs logs --follow` follows the job against a real server: it waits for the first attempt,
rides out a server restart, moves on to the next attempt after a requeue (with a marker line),
and exits by the final attempt; against a server that does not hold long-polls it reads at a
slow pace. Each step waits on what the follower printed (its stdout and stderr read line by
line), never on a sleep."""

from __future__ import annotations

import base64
import queue
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

import pytest

from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.server_cli import env_for

AT = "2026-01-02T03:04:05.000Z"
WAIT = 90.0  # generous: two busy cores


class Follower:
    """``jobagentctl jobs logs JOB --follow`` as a real process, its output read as it comes."""

    def __init__(self, server: LiveServer, job_id: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [*cli_command(), "jobs", "logs", job_id, "--follow", *extra],
            env=env_for(server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out: queue.Queue[bytes] = queue.Queue()
        self.err: queue.Queue[bytes] = queue.Queue()
        self.stdout = b""
        self.stderr = b""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _pump(stream: IO[bytes], lines: queue.Queue[bytes]) -> None:
        for line in iter(stream.readline, b""):
            lines.put(line)
        lines.put(b"")  # end of stream

    def _until(self, lines: queue.Queue[bytes], pattern: bytes, name: str) -> bytes:
        deadline = time.monotonic() + WAIT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} on {name}: {self.stdout!r} / {self.stderr!r}"
            line = lines.get(timeout=left)
            if name == "stdout":
                self.stdout += line
            else:
                self.stderr += line
            assert line, f"{name} ended before {pattern!r}: {self.stdout!r} / {self.stderr!r}"
            if re.search(pattern, line):
                return line

    def stdout_line(self, pattern: bytes) -> bytes:
        return self._until(self.out, pattern, "stdout")

    def stderr_line(self, pattern: bytes) -> bytes:
        return self._until(self.err, pattern, "stderr")

    def finish(self) -> int:
        code = self.proc.wait(timeout=WAIT)
        for lines, name in ((self.out, "stdout"), (self.err, "stderr")):
            while (line := lines.get(timeout=WAIT)) != b"":
                if name == "stdout":
                    self.stdout += line
                else:
                    self.stderr += line
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def follower() -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for one in started:
        one.kill()


def _claim(server: LiveServer, agent: str, job_id: str) -> dict[str, Any]:
    status, job = server.request(
        "POST", f"job-agents/{agent}/jobs/{job_id}/claim", {"leaseSeconds": 60}
    )
    assert status == 200, job
    claimed: dict[str, Any] = job
    return claimed


def _append(server: LiveServer, job: dict[str, Any], data: bytes) -> None:
    chunk = {"stream": "stdout", "at": AT, "data": base64.b64encode(data).decode()}
    body = {"claimId": job["claimId"], "chunks": [chunk]}
    status, answer = server.request("POST", f"jobs/{job['id']}/logs", body)
    assert status == 200, answer


def _finish(server: LiveServer, job: dict[str, Any], final: str) -> None:
    body = {"status": final, "claimId": job["claimId"]}
    status, answer = server.request("PUT", f"jobs/{job['id']}/status", body)
    assert status == 202, answer


def test_follow_waits_for_the_first_attempt(
    shared_server: LiveServer, follower: list[Follower]
) -> None:
    agent = shared_server.create_agent("patient")
    job_id = shared_server.enqueue(agent)["id"]
    follower.append(one := Follower(shared_server, job_id))
    one.stderr_line(rb"waiting for its first attempt")
    job = _claim(shared_server, agent, job_id)
    _append(shared_server, job, b"at last\n")
    one.stdout_line(rb"at last")
    _finish(shared_server, job, "successful")
    assert one.finish() == 0, one.stderr
    assert one.stdout == b"at last\n"


def test_follow_of_a_job_cancelled_before_any_claim_exits_8(
    shared_server: LiveServer, follower: list[Follower]
) -> None:
    agent = shared_server.create_agent("never")
    job_id = shared_server.enqueue(agent)["id"]
    follower.append(one := Follower(shared_server, job_id))
    one.stderr_line(rb"waiting for its first attempt")
    status, _ = shared_server.request("PUT", f"jobs/{job_id}/status", {"status": "cancelled"})
    assert status == 202
    assert one.finish() == 8, one.stderr
    assert b"ended without being claimed" in one.stderr


def test_follow_moves_on_to_the_next_attempt_after_a_requeue(
    shared_server: LiveServer, follower: list[Follower]
) -> None:
    agent = shared_server.create_agent("requeued")
    job_id = shared_server.enqueue(agent)["id"]
    first = _claim(shared_server, agent, job_id)
    _append(shared_server, first, b"first try\n")
    follower.append(one := Follower(shared_server, job_id))
    one.stdout_line(rb"first try")
    body = {"status": "queued", "force": True}
    status, answer = shared_server.request("PUT", f"jobs/{job_id}/status", body)
    assert status == 202, answer
    second = _claim(shared_server, agent, job_id)
    one.stdout_line(rb"following attempt 2")
    _append(shared_server, second, b"second try\n")
    _finish(shared_server, second, "successful")
    assert one.finish() == 0, one.stderr
    assert one.stdout == (
        b"first try\n[jobagentctl: attempt 1 released; following attempt 2]\nsecond try\n"
    )


def test_follow_rides_out_a_server_restart(
    live_server: LiveServer, follower: list[Follower]
) -> None:
    agent = live_server.create_agent("restarted")
    job_id = live_server.enqueue(agent)["id"]
    job = _claim(live_server, agent, job_id)
    _append(live_server, job, b"before\n")
    follower.append(one := Follower(live_server, job_id))
    one.stdout_line(rb"before")
    live_server.stop()
    one.stderr_line(rb"server unreachable, retrying")
    live_server.start()
    _append(live_server, job, b"after\n")
    one.stdout_line(rb"after")
    one.stderr_line(rb"server reachable again")
    _finish(live_server, job, "failure")
    assert one.finish() == 8, one.stderr
    assert one.stdout == b"before\nafter\n"
    assert b"outcome completed, job status failure" in one.stderr


def _log_reads(server: LiveServer) -> int:
    """How many ``GET …/logs`` the server answered, from its /metrics."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        # The route template has braces of its own ({ws}): split the value off the end.
        sample, _, value = line.rpartition(" ")
        counted = sample.startswith("jobagentctl_http_request_duration_seconds_count{")
        if counted and 'method="GET"' in sample and '/logs"' in sample:
            total += float(value)
    return int(total)


def test_follow_paces_reads_when_the_server_does_not_hold_them(
    live_server_factory: LiveServerFactory, follower: list[Follower]
) -> None:
    server = live_server_factory(max_wait_seconds=0)
    agent = server.create_agent("quiet")
    job_id = server.enqueue(agent)["id"]
    job = _claim(server, agent, job_id)
    _append(server, job, b"one line, then silence\n")
    follower.append(one := Follower(server, job_id))
    one.stdout_line(rb"silence")
    # A rate is a count over a span of time: this one is measured, not waited on. A busy
    # machine only lowers the count; without pacing it is hundreds.
    before = _log_reads(server)
    time.sleep(5)
    during = _log_reads(server) - before
    assert during < 10, f"{during} log reads in 5 s of silence"
    _finish(server, job, "successful")
    assert one.finish() == 0, one.stderr
