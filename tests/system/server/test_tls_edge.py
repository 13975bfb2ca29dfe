"""The connection limits hold over TLS, against a real ``server start --tls-cert/--tls-key``.

The TLS layer sits below the HTTP protocol that enforces them (``connections.py``): these tests
check that every limit still sees the decrypted bytes, that a handshake is cut off like a slow
header, that it counts against the connection cap, and that a long-poll still sees its client
leave. SQLite only: no database is involved in what they exercise.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.tls import TlsFiles, client_context, make_tls_files
from tests.fixtures.waiting import wait_until
from tests.system.server.sockets import closed_within, trickled_until_closed

HEADER_CAP = 16 * 1024  # the default max_header_bytes


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path / "tls")


@pytest.fixture
def servers(tmp_path: Path, tls: TlsFiles) -> Iterator[LiveServerFactory]:
    with LiveServerFactory(f"sqlite:///{tmp_path / 'edge.db'}", tmp_path) as factory:
        yield factory


def _start(servers: LiveServerFactory, tls: TlsFiles, **settings: Any) -> LiveServer:
    return servers(ca_bundle=tls.ca, **tls.settings(), **settings)


def _raw(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _tls(server: LiveServer, tls: TlsFiles) -> ssl.SSLSocket:
    return client_context(tls.ca).wrap_socket(_raw(server), server_hostname="127.0.0.1")


def _fin_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    """Whether the TCP connection under ``sock`` ends (FIN) within ``seconds``."""
    with socket.socket(fileno=os.dup(sock.fileno())) as raw:
        raw.settimeout(seconds)
        try:
            return raw.recv(1) == b""
        except TimeoutError:
            return False


def _long_polls(server: LiveServer) -> float:
    status, text = server.request("GET", "/metrics", api_key=None)
    assert status == 200
    line = next(x for x in str(text).splitlines() if x.startswith("jobagentctl_long_polls_wait"))
    return float(line.split()[1])


def test_handshake_headers_and_idle_limits_hold_over_tls(
    servers: LiveServerFactory, tls: TlsFiles
) -> None:
    """Header, body and idle timeouts 1 s: a client that never starts its handshake is cut off
    then (asyncio's own handshake timeout is 60 s), as are slow headers, an idle connection
    after its handshake and a slow body; headers over the cap are answered 431 over TLS."""
    server = _start(servers, tls, header_timeout=1, keep_alive_timeout=1, body_timeout=1)
    stalled = _raw(server)
    assert closed_within(stalled, 30) == b"", "a stalled handshake was not cut off"

    slow = _tls(server, tls)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    closed = trickled_until_closed(slow)
    assert closed == b"", "slow headers over TLS were not cut off"

    idle = _tls(server, tls)
    assert closed_within(idle, 30) == b"", "an idle TLS connection stayed open"
    # The socket closes with the close_notify: asyncio would wait up to 5 s for the client's
    # (an idle client in a pool sends none), holding a place under the cap all that time.
    assert _fin_within(idle, 2.5), "the socket lingered after the server's close_notify"

    big = _tls(server, tls)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    big.sendall(head + b"a" * (HEADER_CAP + 1 - len(head)))
    answer = closed_within(big, 30)
    assert answer is not None and answer.startswith(b"HTTP/1.1 431 "), answer

    # A body that never completes is cut off after body_timeout, over TLS too.
    agent = server.create_agent("slow")
    path = f"/api/v1/workspaces/{server.workspace_id}/job-agents/{agent}/jobs"
    body = _tls(server, tls)
    body.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {server.api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[".encode()
    )
    closed = None
    deadline = time.monotonic() + 30
    while closed is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            body.sendall(b" ")
        closed = closed_within(body, 0.2)
    assert closed == b"", f"a slow body over TLS was not cut off: {closed!r}"
    for sock in (stalled, slow, idle, big, body):
        sock.close()


def test_handshakes_count_against_the_cap_and_long_polls_see_clients_leave(
    servers: LiveServerFactory, tls: TlsFiles
) -> None:
    server = _start(
        servers,
        tls,
        max_connections=20,
        header_timeout=600,
        keep_alive_timeout=600,
        max_wait_seconds=600,
    )
    # A long-poll over TLS ends when its client goes away: the job queued afterwards is not
    # claimed for nobody.
    agent = server.create_agent("poller")
    path = f"/api/v1/workspaces/{server.workspace_id}/job-agents/{agent}/claim"
    body = json.dumps({"waitSeconds": 300, "leaseSeconds": 30}).encode()
    poll = _tls(server, tls)
    poll.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {server.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    wait_until(lambda: _long_polls(server) == 1, what="the long-poll to wait")
    poll.close()
    wait_until(lambda: _long_polls(server) == 0, what="the long-poll to see its client leave")
    job = server.enqueue(agent)
    assert server.get_job(job["id"])["status"] == "queued"

    # 20 connections that never start their handshake fill the cap; a new client is served,
    # and the oldest of them makes room.
    stalled = [_raw(server) for _ in range(20)]
    status, _ = server.request("GET", "/healthz", api_key=None)
    assert status == 200
    assert closed_within(stalled[0], 30) == b"", "the oldest handshake was not evicted"
    for sock in stalled:
        sock.close()
