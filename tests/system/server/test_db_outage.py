"""A database that goes away under a running server (PostgreSQL): backends terminated while
requests are in flight, the whole cluster stopped. Every answer is a 503 with Retry-After,
never a 500; the broken connections are not reused; the log keeps one line per event.

A private cluster: stopping it must not touch the shared server the other suites use.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from tools.chaos.pgcluster import PgCluster

from tests.fixtures import pgsync
from tests.fixtures.databases import private_cluster
from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.waiting import wait_until

AT = "2026-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    pg = private_cluster("no private PostgreSQL cluster")
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def server(cluster: PgCluster, tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    name = f"o_{uuid4().hex[:12]}"
    url = cluster.create_database(name)
    with LiveServerFactory(url, tmp_path) as factory:
        # A bound well above the test's own waits: the requests are cut by the termination,
        # not by the statement timeout.
        yield factory(database_timeout=60), name


def _call(server: LiveServer, method: str, path: str, body: Any) -> tuple[int, Any, str | None]:
    """(status, JSON body, Retry-After) of one request with the workspace key."""
    request = urllib.request.Request(
        f"{server.api_url}/{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"X-API-Key": server.api_key, "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=120) as response:
            return response.status, json.loads(response.read() or b"null"), None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), error.headers.get("Retry-After")


def _server_backends(conn: pgsync.SyncConnection, database: str, *, waiting: bool) -> int:
    rows = conn.fetch(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = "
        "'jobagentctl' AND ($2 IS FALSE OR wait_event_type = 'Lock')",
        database,
        waiting,
    )
    return int(rows[0][0])


def test_backends_terminated_mid_request_answer_503_never_500(
    server: tuple[LiveServer, str], cluster: PgCluster
) -> None:
    """Requests of every kind wait on row locks a test transaction holds; the server's
    backends are terminated under them: each answers 503 with Retry-After (0 answers of 500),
    and the same requests succeed afterwards on fresh connections."""
    live, database = server
    agent = live.create_agent("outage")
    jobs = []
    for _ in range(6):
        live.enqueue(agent)
        status, claimed, _ = _call(live, "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 300})
        assert status == 200, claimed
        jobs.append(claimed)
    chunk = {"stream": "stdout", "at": AT, "data": base64.b64encode(b"line\n").decode()}

    def request_for(index: int, job: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        kind = index % 3
        if kind == 0:
            return "POST", f"jobs/{job['id']}/heartbeat", {"claimId": job["claimId"]}
        if kind == 1:
            return "POST", f"jobs/{job['id']}/logs", {"claimId": job["claimId"], "chunks": [chunk]}
        return (
            "PUT",
            f"jobs/{job['id']}/status",
            {"status": "successful", "claimId": job["claimId"]},
        )

    answers: list[tuple[int, Any, str | None]] = []
    lock = threading.Lock()

    def send(index: int, job: dict[str, Any]) -> None:
        answer = _call(live, *request_for(index, job))
        with lock:
            answers.append(answer)

    ids = [job["id"] for job in jobs]
    holder = pgsync.connect(cluster.database_url(database))
    try:
        holder.execute("BEGIN")
        holder.fetch("SELECT 1 FROM job WHERE id = ANY($1::uuid[]) FOR UPDATE", ids)
        holder.fetch("SELECT 1 FROM job_claim WHERE job_id = ANY($1::uuid[]) FOR UPDATE", ids)
        threads = [
            threading.Thread(target=send, args=(i, job), daemon=True) for i, job in enumerate(jobs)
        ]
        for thread in threads:
            thread.start()
        with pgsync.connect(cluster.url) as admin:
            wait_until(
                lambda: _server_backends(admin, database, waiting=True) >= 4,
                what="the requests to wait on the held locks",
            )
            admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 "
                "AND application_name LIKE 'jobagentctl%'",
                database,
            )
        for thread in threads:
            thread.join(120)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    statuses = sorted(status for status, _, _ in answers)
    assert len(answers) == len(jobs)
    assert 500 not in statuses, answers
    cut = [(status, body, retry) for status, body, retry in answers if status != 200]
    assert len(cut) >= 4, answers
    for status, body, retry in cut:
        assert status == 503 and retry == "1", (status, body, retry)
    # The terminated connections were discarded: the same requests go through now.
    for index, job in enumerate(jobs):
        status, body, _ = _call(live, *request_for(index, job))
        assert status in (200, 202, 409), (status, body)  # 409: a status already accepted
        assert status != 409 or body["code"] == "JOB_TERMINAL", body


def test_a_database_outage_logs_one_line_per_event(
    server: tuple[LiveServer, str], cluster: PgCluster
) -> None:
    """The cluster stopped for a while: the driver's pool retries its connections (asyncpg
    logged a traceback each time); every line of the server's log is a record of its own."""
    live, _ = server
    agent = live.create_agent("outage-log")
    cluster.halt("fast")
    try:
        wait_until(
            lambda: "restore the pool connection floor" in live.log(),
            what="the driver to fail reopening its connections",
            timeout=90,
        )
        status, body, retry = _call(live, "POST", f"job-agents/{agent}/jobs", {})
        assert status == 503 and retry == "1", (status, body)
        assert "\n" not in body["message"]
        # /readyz's body says where and why (the load balancer's log shows it).
        status, ready = live.request("GET", "/readyz", api_key=None)
        assert status == 503, ready
        assert f"cannot connect to PostgreSQL at 127.0.0.1:{cluster.port}" in ready["message"]
        assert "connection refused" in ready["message"], ready
    finally:
        cluster.resume()
    wait_until(lambda: live.request("GET", "/readyz", api_key=None)[0] == 200, what="ready")
    lines = live.log().splitlines()
    continued = [line for line in lines if line.startswith((" ", "\t", "Traceback"))]
    assert not continued, "\n".join(lines[-60:])
    floor = [line for line in lines if "restore the pool connection floor" in line]
    # Each says why (refused, or "shutting down" while the cluster stopped).
    assert floor and all("retrying: " in line for line in floor), floor


def test_backends_terminated_five_times_under_load_answer_no_500(
    server: tuple[LiveServer, str], cluster: PgCluster
) -> None:
    """Four agents' worth of claim, heartbeat, log append and completion in a loop; every
    server backend terminated five times, each once the loop has made progress since the
    last: no answer is a 500, every failure a 503 with Retry-After, and work goes on."""
    live, database = server
    agent = live.create_agent("load")
    chunk = {"stream": "stdout", "at": AT, "data": base64.b64encode(b"x" * 100).decode()}
    stop = threading.Event()
    lock = threading.Lock()
    answers: list[tuple[str, int, str | None]] = []
    completed = [0]

    def record(kind: str, answer: tuple[int, Any, str | None]) -> int:
        with lock:
            answers.append((kind, answer[0], answer[2]))
        return answer[0]

    def worker() -> None:
        while not stop.is_set():
            record("enqueue", _call(live, "POST", f"job-agents/{agent}/jobs", {}))
            status, job, retry = _call(
                live, "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 300}
            )
            record("claim", (status, job, retry))
            if status != 200 or not job:
                continue
            claim = job["claimId"]
            record(
                "heartbeat", _call(live, "POST", f"jobs/{job['id']}/heartbeat", {"claimId": claim})
            )
            body = {"claimId": claim, "chunks": [chunk]}
            record("logs", _call(live, "POST", f"jobs/{job['id']}/logs", body))
            done = {"status": "successful", "claimId": claim}
            if record("status", _call(live, "PUT", f"jobs/{job['id']}/status", done)) == 202:
                with lock:
                    completed[0] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    terminated = 0

    def progress() -> str:
        with lock:
            return f"{completed[0]} completed; last answers {answers[-8:]}"

    try:
        with pgsync.connect(cluster.url) as admin:
            for _ in range(5):
                before = completed[0]

                def progressed(b: int = before) -> bool:
                    return completed[0] >= b + 4

                try:
                    wait_until(progressed, what="progress")
                except AssertionError:
                    raise AssertionError(progress()) from None
                rows = admin.fetch(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = $1 AND application_name LIKE 'jobagentctl%'",
                    database,
                )
                terminated += int(rows[0][0])
            before = completed[0]
            wait_until(lambda: completed[0] >= before + 4, what="recovery")
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    assert terminated >= 5
    errors = [a for a in answers if a[1] >= 500]
    assert not [a for a in errors if a[1] != 503 or a[2] != "1"], errors
    print(
        f"{len(answers)} answers, {completed[0]} jobs completed, {terminated} backends "
        f"terminated, {len(errors)} answers of 503, 0 of 500"
    )
