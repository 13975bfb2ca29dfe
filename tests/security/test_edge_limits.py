"""Connection limits below the app (issue 11 §1, §2), against a real ``server start`` process.

No database is involved in what these tests exercise (the limits act before a request exists),
so they run on SQLite only. Durations are generous bounds on events (a close), never speed
claims; the figures are in docs/security.md with the scripts that produce them.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.live_server import LiveServer, LiveServerFactory

HEADER_CAP = 16 * 1024  # the default max_header_bytes


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[LiveServerFactory]:
    factory = LiveServerFactory(f"sqlite:///{tmp_path / 'edge.db'}", tmp_path)
    try:
        yield factory
    finally:
        factory.close()


def _connect(server: LiveServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """Everything the server sent before closing, or None if it is still open after
    ``seconds``."""
    sock.settimeout(seconds)
    received = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        return received


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _healthz(server: LiveServer) -> int:
    status, _ = server.request("GET", "/healthz", api_key=None)
    return status


def test_regression_oversized_headers_get_431_before_they_are_read(
    servers: LiveServerFactory,
) -> None:
    """Issue 11 §1: 8 × 50 MB of headers grew the server by 1.2 GB. Now one byte over the cap
    is answered 431 and closed while the client has sent nothing more; RSS does not grow."""
    server = servers()
    assert server.proc is not None
    sock = _connect(server)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    sock.sendall(head + b"a" * (HEADER_CAP + 1 - len(head)))  # no end of headers yet
    answer = _closed_within(sock, 30)
    sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 431 "), answer
    assert b'"code": "HEADERS_TOO_LARGE"' in answer

    # Exactly at the cap is served.
    sock = _connect(server)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
    sock.sendall(request + b"a" * (HEADER_CAP - len(request) - 4) + b"\r\n\r\n")
    answer = _closed_within(sock, 30)
    sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 200 "), answer

    # A flood: 4 connections trying to send 32 MB of headers each.
    before = _rss_mib(server.proc.pid)
    for _ in range(4):
        sock = _connect(server)
        sent = 0
        with contextlib.suppress(OSError):
            sock.sendall(head)
            for _ in range(32):
                sock.sendall(b"a" * (1 << 20))
                sent += 1
        sock.close()
        assert sent < 32, "the server read 32 MB of headers"
    assert _rss_mib(server.proc.pid) - before < 16
    assert _healthz(server) == 200


def test_regression_slow_headers_and_idle_connections_are_closed(
    servers: LiveServerFactory,
) -> None:
    """Issue 11 §2: a slowloris connection (a byte at a time) and an idle one were never
    closed. Header timeout 1 s, idle timeout 1 s here."""
    server = servers(header_timeout=1, keep_alive_timeout=1)
    slow = _connect(server)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    idle = _connect(server)
    closed_slow = None
    deadline = time.monotonic() + 30
    while closed_slow is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            slow.sendall(b"X")  # keeps trickling: the header timeout must still fire
        closed_slow = _closed_within(slow, 0.2)
    assert closed_slow == b"", "slow headers were not cut off"
    assert _closed_within(idle, 30) == b"", "an idle connection stayed open"
    # After a response, the kept-alive connection is closed when idle too.
    kept = _connect(server)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = _closed_within(kept, 30)
    assert answer is not None and answer.startswith(b"HTTP/1.1 200 ")
    for sock in (slow, idle, kept):
        sock.close()


def test_regression_connection_cap_evicts_the_oldest_idle_connection(
    servers: LiveServerFactory,
) -> None:
    """Issue 11 §2: with the cap reached by idle connections, a new client is still served;
    the oldest idle connection makes room."""
    server = servers(max_connections=20, keep_alive_timeout=600, header_timeout=600)
    # Accepted in the order they connect: the first one is the oldest.
    idle = [_connect(server) for _ in range(20)]
    assert _healthz(server) == 200
    assert _closed_within(idle[0], 30) == b"", "the oldest idle connection was not evicted"
    assert _healthz(server) == 200
    for sock in idle:
        sock.close()


def test_the_fd_soft_limit_is_raised_to_the_hard_limit(servers: LiveServerFactory) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    if low == hard:
        pytest.skip(f"the hard open-file limit is {hard}: nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        server = servers()  # inherits the low soft limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server.proc is not None
    limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    server_soft, server_hard = line.split()[3:5]
    assert server_soft == server_hard == str(hard)
