"""Real server processes: reaper timing, SIGTERM drain, restart, key revocation.

Each test starts ``python -m jobagentctl server start`` through the ``live_server`` fixtures.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
import urllib.error
from typing import Any

import pytest

from tests.fixtures.live_server import LiveServer, server_metrics
from tests.fixtures.waiting import wait_until

# Slow: a live server process per test: `make test-fast` leaves it out, `make test` runs it.
pytestmark = pytest.mark.slow


def test_reaper_requeues_an_abandoned_claim_within_lease_plus_reap_interval(
    live_server: LiveServer,
) -> None:
    """Detection time is at most lease + reap interval (+ scheduling slack), never before the
    lease ends. Settings: lease 1 s, reap interval 0.2 s."""
    agent = live_server.create_agent("crashy")
    job = live_server.enqueue(agent)
    sent = time.monotonic()
    status, claimed = live_server.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 1})
    assert status == 200
    assert claimed["id"] == job["id"]
    assert claimed["leaseSeconds"] == 1
    # Nobody heartbeats: the agent "crashed".
    wait_until(
        lambda: live_server.get_job(job["id"])["status"] == "queued", what="the reaper to requeue"
    )
    detected = time.monotonic() - sent
    print(f"\nreaper detection: {detected:.2f}s for lease 1s + reap interval 0.2s")
    assert detected >= 0.9, "requeued before its lease ended"
    # Promptly, not never: 3 s of slack failed on two busy cores; the bound is for a reaper that
    # stopped (the wait above gives up at 60 s), the lower one is the lease's.
    assert detected < 1 + 0.2 + 30, f"too slow: {detected:.2f}s"
    status, attempts = live_server.request("GET", f"jobs/{job['id']}/attempts")
    assert [a["outcome"] for a in attempts] == ["expired"]
    status, again = live_server.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 30})
    assert status == 200
    assert again["attempt"] == 2
    assert again["claimId"] != claimed["claimId"]
    # The reaper's work shows in /metrics.
    status, text = live_server.request("GET", "/metrics", api_key=None)
    assert status == 200
    assert 'jobagentctl_reaped_total{outcome="requeued"} 1.0' in str(text)


def test_sigterm_drains_in_flight_requests_and_wakes_long_polls(live_server: LiveServer) -> None:
    agent = live_server.create_agent("waiter")
    results: dict[str, Any] = {}

    def long_poll() -> None:
        started = time.monotonic()
        results["poll"] = live_server.request(
            "POST", f"job-agents/{agent}/claim", {"waitSeconds": 25}, timeout=60
        )
        results["poll_seconds"] = time.monotonic() - started

    thread = threading.Thread(target=long_poll)
    thread.start()
    # Wait until the server reports the long-poll as waiting.
    waiting = "jobagentctl_long_polls_waiting 1.0"
    wait_until(lambda: waiting in server_metrics(live_server), what="the long-poll to wait")
    assert live_server.proc is not None
    stopping = time.monotonic()
    live_server.proc.send_signal(signal.SIGTERM)
    thread.join(30)
    assert not thread.is_alive()
    assert results["poll"][0] == 204  # answered, not cut off
    assert results["poll_seconds"] < 20
    code = live_server.proc.wait(30)
    drained = time.monotonic() - stopping
    assert code == 0, live_server.log()[-2000:]
    assert drained < 15
    log = live_server.log()
    assert "stopped" in log
    assert live_server.api_key not in log
    assert live_server.api_key.split(".", 1)[1] not in log
    with pytest.raises(urllib.error.URLError):
        live_server.request("GET", "/healthz", api_key=None, timeout=2)


def test_restart_keeps_the_queue(live_server: LiveServer) -> None:
    assert f"jobagentctl server listening on {live_server.url}" in live_server.log()
    # The server extra installs uvloop, and `loop = auto` runs on it (the faster loop).
    assert "event loop: uvloop" in live_server.log()
    # Its collector set for a heap of thousands of connections (heap.py): startup objects
    # frozen, collections on a clock instead of CPython's allocation count.
    assert re.search(
        r"heap: [1-9]\d* startup objects frozen, a young collection every 0.1 s", live_server.log()
    )
    agent = live_server.create_agent("a")
    job = live_server.enqueue(agent)
    live_server.restart()
    assert live_server.get_job(job["id"])["status"] == "queued"


def test_revoked_key_is_refused_by_a_running_server(live_server: LiveServer) -> None:
    agent = live_server.create_agent("a")
    key = live_server.create_key(agent)
    status, _ = live_server.request("GET", f"job-agents/{agent}/jobs", api_key=key)
    assert status == 200
    live_server.revoke_key(key)
    status, body = live_server.request("GET", f"job-agents/{agent}/jobs", api_key=key)
    assert status == 401  # key_cache_seconds=0 in the fixture: at once
    assert body["code"] == "UNAUTHORIZED"
    # The workspace key is unaffected.
    status, _ = live_server.request("GET", f"job-agents/{agent}/jobs")
    assert status == 200


def test_a_long_poll_whose_client_hangs_up_claims_nothing(live_server: LiveServer) -> None:
    agent = live_server.create_agent("impatient")
    body = json.dumps({"waitSeconds": 25, "leaseSeconds": 30}).encode()
    request = (
        f"POST /api/v1/workspaces/{live_server.workspace_id}/job-agents/{agent}/claim HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nX-API-Key: {live_server.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    waiting = "jobagentctl_long_polls_waiting 1.0"
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=10) as sock:
        sock.sendall(request)
        wait_until(lambda: waiting in server_metrics(live_server), what="the long-poll to wait")
    # The connection is closed (Ctrl-C on `claim --wait`): the server stops waiting, well
    # before the 25 s the client asked for.
    stopped = "jobagentctl_long_polls_waiting 0.0"
    # A behaviour's bound, not a machine's: the wait itself would end at 25 s.
    wait_until(lambda: stopped in server_metrics(live_server), what="the wait to stop", timeout=15)
    job = live_server.enqueue(agent)
    status, claims = live_server.request("GET", "job-claims")
    assert status == 200
    assert claims["items"] == []
    assert live_server.get_job(job["id"])["status"] == "queued"
