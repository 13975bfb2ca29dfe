"""`jobagentctl jobs logs` against a real server: bytes as stored, JSON lines, --follow to the
attempt's end (exit 0 / 8), unknown job or attempt (5). The CLI's business: one server (SQLite)
for the module is enough; the server's logs are tested on both databases in
tests/integration/server."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

from tests.fixtures.cli import cli_command
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import env_for, jac

AT = "2026-01-02T03:04:05.000Z"
RAW = b"caf\xc3\xa9\n\xff\xfe raw\n"


def _claimed(server: LiveServer) -> dict[str, Any]:
    agent = server.create_agent("logger")
    server.enqueue(agent)
    status, job = server.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 60})
    assert status == 200, job
    claimed: dict[str, Any] = job
    return claimed


def _append(server: LiveServer, job: dict[str, Any], *chunks: tuple[str, bytes]) -> None:
    body = {
        "claimId": job["claimId"],
        "chunks": [
            {"stream": s, "at": AT, "data": base64.b64encode(d).decode()} for s, d in chunks
        ],
    }
    status, answer = server.request("POST", f"jobs/{job['id']}/logs", body)
    assert status == 200, answer


def test_logs_prints_bytes_and_json_lines(shared_server: LiveServer) -> None:
    job = _claimed(shared_server)
    _append(shared_server, job, ("stdout", b"one\n"), ("stderr", RAW))
    _append(
        shared_server, job, ("marker", b"[jobagentctl: 3 bytes dropped: test]"), ("stdout", b"x")
    )
    ran = jac(shared_server, "jobs", "logs", job["id"])
    assert ran.returncode == 0, ran.stderr
    expected = "one\n" + RAW.decode("utf-8", "replace") + "[jobagentctl: 3 bytes dropped: test]\nx"
    assert ran.stdout == expected
    ran = jac(shared_server, "jobs", "logs", job["id"], "-o", "json")
    lines = [json.loads(line) for line in ran.stdout.splitlines()]
    assert lines[0]["at"].startswith("2026-01-02T03:04:05")
    del lines[0]["at"]
    assert lines[0] == {"seq": 1, "offset": 0, "stream": "stdout", "data": "one\n"}
    assert lines[1]["encoding"] == "base64"
    assert base64.b64decode(lines[1]["data"]) == RAW
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]


def test_logs_of_an_unknown_job_exits_5(shared_server: LiveServer) -> None:
    ran = jac(shared_server, "jobs", "logs", "00000000-0000-4000-8000-000000000000")
    assert ran.returncode == 5, ran.stderr
    ran = jac(shared_server, "jobs", "logs", _claimed(shared_server)["id"], "--attempt", "2")
    assert ran.returncode == 5, ran.stderr


def _follow(server: LiveServer, job_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*cli_command(), "jobs", "logs", job_id, "--follow"],
        env=env_for(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_follow_ends_with_the_attempt(shared_server: LiveServer) -> None:
    for final, code in (("successful", 0), ("failure", 8)):
        job = _claimed(shared_server)
        follower = _follow(shared_server, job["id"])
        try:
            _append(shared_server, job, ("stdout", b"working\n"))
            status, _ = shared_server.request(
                "PUT", f"jobs/{job['id']}/status", {"status": final, "claimId": job["claimId"]}
            )
            assert status == 202
            out, err = follower.communicate(timeout=60)
        finally:
            follower.kill()
        assert follower.returncode == code, err
        assert out == b"working\n"
        if code:
            assert b"did not succeed" in err


def test_an_attempt_without_output_says_so(shared_server: LiveServer) -> None:
    job = _claimed(shared_server)
    status, _ = shared_server.request(
        "PUT", f"jobs/{job['id']}/status", {"status": "successful", "claimId": job["claimId"]}
    )
    assert status == 202
    for follow in ((), ("--follow",), ("--follow", "--attempt", "1")):
        ran = jac(shared_server, "jobs", "logs", job["id"], *follow)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == ""
        assert ran.stderr == "no output was shipped for this attempt\n"
