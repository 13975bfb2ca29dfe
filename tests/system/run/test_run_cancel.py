"""`jobagentctl cancel` reaches a running command within about a second, whatever the lease
(issue 12 §6): `run` keeps the claim long-poll (``POST …/jobs/{id}/wait``) open while the
command runs. With a 300 s lease heartbeats come every 75–100 s: a stop within the 30 s hang
timeout below can only have come through the long-poll (and the record counts 0 heartbeats).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fixtures.live_server import LiveServer
from tests.fixtures.waiting import wait_until

from .runs import Harness

LONG_LEASE = "300"
HANG = 30.0  # far below the first heartbeat (≥ 75 s), far above a busy machine's second
TRAP_STOP = (
    "trap 'cat \"$JOBAGENTCTL_STOP_REASON_FILE\" > reason; exit 0' TERM; "
    "touch ready; while :; do sleep 0.05; done"
)


def cancel(server: LiveServer, job_id: str, command: str = "cancel") -> None:
    done = server.cli(command, job_id)
    assert done.returncode == 0, done.stderr


def assert_cancelled(harness: Harness, run_workdir: Path, job_id: str) -> None:
    job = harness.job(job_id)
    assert job["status"] == "cancelled"
    assert [a["outcome"] for a in harness.attempts(job_id)] == ["cancelled"]
    assert (run_workdir / "reason").read_text() == "cancelled\n"


def test_cancel_reaches_the_child_at_once_with_a_long_lease(own_harness: Harness) -> None:
    job_id = own_harness.enqueue()
    run = own_harness.start(["--lease-seconds", LONG_LEASE], ["sh", "-c", TRAP_STOP])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    cancel(own_harness.server, job_id)
    wait_until(
        (run.workdir / "reason").exists, what="the child to get the stop signal", timeout=HANG
    )
    assert run.wait() == 143, run.stderr()
    assert_cancelled(own_harness, run.workdir, job_id)
    [record] = run.report()
    assert (record["status"], record["reason"]) == ("cancelled", "cancelled")
    assert record["heartbeats"] == 0  # the long-poll told it, not a heartbeat


def test_cancel_through_another_replica_reaches_the_child(own_harness: Harness) -> None:
    replica = own_harness.server.replica()
    job_id = own_harness.enqueue()
    run = own_harness.start(["--lease-seconds", LONG_LEASE], ["sh", "-c", TRAP_STOP])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    cancel(replica, job_id)  # the run's long-poll is open on the first server
    wait_until(
        (run.workdir / "reason").exists, what="the child to get the stop signal", timeout=HANG
    )
    assert run.wait() == 143, run.stderr()
    assert_cancelled(own_harness, run.workdir, job_id)
    assert run.report()[0]["heartbeats"] == 0


def test_a_requeue_is_confirmed_by_a_heartbeat_and_stops_the_child_as_requeued(
    harness: Harness,
) -> None:
    job_id = harness.enqueue()
    run = harness.start(["--lease-seconds", LONG_LEASE], ["sh", "-c", TRAP_STOP])
    wait_until((run.workdir / "ready").exists, what="the child to start")
    cancel(harness.server, job_id, "requeue")  # the claim ends: released by an operator
    wait_until(
        (run.workdir / "reason").exists, what="the child to get the stop signal", timeout=HANG
    )
    assert run.wait() == 75, run.stderr()
    # The confirming heartbeat's verdict: queued inside our own lease, so an operator did it
    # (exit 75 as for a lost lease, the stop reason says which).
    assert "requeued by an operator" in run.stderr()
    assert (run.workdir / "reason").read_text() == "requeued\n"
    assert harness.job(job_id)["status"] == "queued"  # nothing reported over it
    [record] = run.report()
    assert (record["status"], record["reported"]) == (None, False)
    assert record["heartbeats"] == 0  # none came through (the confirmation was refused 409)


def test_a_job_that_completes_is_not_lease_lost(own_harness: Harness) -> None:
    # The job's own report ends the claim, which answers the open long-poll: never a verdict.
    job_id = own_harness.enqueue()
    run = own_harness.start(["--lease-seconds", LONG_LEASE, "--debug"], ["true"])
    assert run.wait() == 0, run.stderr()
    assert own_harness.job(job_id)["status"] == "successful"
    assert "lease_lost" not in run.stderr()
    assert [a["outcome"] for a in own_harness.attempts(job_id)] == ["completed"]


# --- a server without the long-poll ------------------------------------------------------------


class _WithoutWait(BaseHTTPRequestHandler):
    """Forwards everything to the real server but ``POST …/wait``, answered as an older
    jobagentctl server does (its generic 404)."""

    upstream: str = ""
    waits: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "POST" and self.path.endswith("/wait"):
            self.waits.append(self.path)
            data = json.dumps({"message": "not found", "code": "NOT_FOUND", "details": None})
            self._answer(404, "application/json", data.encode())
            return
        target = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(target.hostname or "", target.port, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            kind = response.getheader("Content-Type") or "application/json"
            self._answer(response.status, kind, payload)
        finally:
            conn.close()

    def _answer(self, status: int, kind: str, payload: bytes) -> None:
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if status != 204:
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _relay


@pytest.fixture
def old_server(harness: Harness) -> Iterator[tuple[str, list[str]]]:
    """The shared server behind a proxy that has no ``/wait``: (its URL, the waits it saw)."""
    waits: list[str] = []
    handler = type("Handler", (_WithoutWait,), {"upstream": harness.server.url, "waits": waits})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    proxy.daemon_threads = True
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}", waits
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_without_the_long_poll_jobs_run_and_heartbeats_still_see_a_cancel(
    harness: Harness, old_server: tuple[str, list[str]]
) -> None:
    url, waits = old_server
    env = {"JOBAGENTCTL_URL": url}
    done_id = harness.enqueue()
    first = harness.start(["--lease-seconds", "3", "--debug"], ["true"], name="done", env=env)
    assert first.wait() == 0, first.stderr()
    assert harness.job(done_id)["status"] == "successful"
    assert "no claim long-poll" in first.stderr()
    assert len(waits) == 1  # asked once, then heartbeats only

    job_id = harness.enqueue()
    run = harness.start(["--lease-seconds", "3"], ["sh", "-c", TRAP_STOP], env=env)
    wait_until((run.workdir / "ready").exists, what="the child to start")
    cancel(harness.server, job_id)
    wait_until((run.workdir / "reason").exists, what="a heartbeat to see the cancel", timeout=HANG)
    assert run.wait() == 143, run.stderr()
    assert_cancelled(harness, run.workdir, job_id)
    assert "claim long-poll failed" not in run.stderr()  # no warning: quietly not used
