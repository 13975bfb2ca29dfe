"""Connection limits below the app, against a real ``server start`` process.

No database is involved in what these tests exercise (the limits act before a request exists),
so they run on SQLite only. Durations are generous bounds on events (a close), never speed
claims; the figures are in docs/security.md with the scripts that produce them.
"""

from __future__ import annotations

import contextlib
import json
import resource
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl.errors import ConfigError
from jobagentctl.server.http.runner import _protocol_options
from jobagentctl.server.settings import ServerSettings
from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.waiting import wait_until
from tests.system.server.sockets import closed_within, trickled_until_closed

HEADER_CAP = 16 * 1024  # the default max_header_bytes


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[LiveServerFactory]:
    with LiveServerFactory(f"sqlite:///{tmp_path / 'edge.db'}", tmp_path) as factory:
        yield factory


def _connect(server: LiveServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    return sock


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
    """8 × 50 MB of headers grew the server by 1.2 GB. Now one byte over the cap
    is answered 431 and closed while the client has sent nothing more; RSS does not grow."""
    server = servers()
    assert server.proc is not None
    sock = _connect(server)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    sock.sendall(head + b"a" * (HEADER_CAP + 1 - len(head)))  # no end of headers yet
    answer = closed_within(sock, 30)
    sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 431 "), answer
    assert b'"code": "HEADERS_TOO_LARGE"' in answer

    # Exactly at the cap is served.
    sock = _connect(server)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
    sock.sendall(request + b"a" * (HEADER_CAP - len(request) - 4) + b"\r\n\r\n")
    answer = closed_within(sock, 30)
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
    """A slowloris connection (a byte at a time) and an idle one were never
    closed. Header timeout 1 s, idle timeout 1 s here."""
    server = servers(header_timeout=1, keep_alive_timeout=1)
    slow = _connect(server)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    idle = _connect(server)
    closed_slow = trickled_until_closed(slow)
    assert closed_slow == b"", "slow headers were not cut off"
    assert closed_within(idle, 30) == b"", "an idle connection stayed open"
    # After a response, the kept-alive connection is closed when idle too.
    kept = _connect(server)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = closed_within(kept, 30)
    assert answer is not None and answer.startswith(b"HTTP/1.1 200 ")
    for sock in (slow, idle, kept):
        sock.close()


def test_regression_connection_cap_evicts_the_oldest_idle_connection(
    servers: LiveServerFactory,
) -> None:
    """With the cap reached by idle connections, a new client is still served;
    the oldest idle connection makes room."""
    server = servers(max_connections=20, keep_alive_timeout=600, header_timeout=600)
    # Accepted in the order they connect: the first one is the oldest.
    idle = [_connect(server) for _ in range(20)]
    assert _healthz(server) == 200
    assert closed_within(idle[0], 30) == b"", "the oldest idle connection was not evicted"
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


def _server_read_everything(server: LiveServer, socks: list[socket.socket]) -> bool:
    """True when the server has read every byte these client sockets sent: the receive queue
    of each one's server-side socket (``/proc/net/tcp``, IPv4 loopback) is empty. The event a
    test waits on before counting on the server's view of those connections."""
    ports = {sock.getsockname()[1] for sock in socks}
    seen = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if local_port == server.port and remote_port in ports:
            if int(fields[4].split(":")[1], 16) != 0:
                return False
            seen += 1
    return seen == len(ports)


def _slow_request(
    server: LiveServer, path: str, *, api_key: str | None, method: str = "POST"
) -> socket.socket:
    """A request whose headers are complete and whose 1,000,000-byte body has sent one byte."""
    sock = _connect(server)
    key = f"X-API-Key: {api_key}\r\n" if api_key else ""
    sock.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\n{key}Content-Type: application/json\r\n"
        "Content-Length: 1000000\r\n\r\n[".encode()
    )
    return sock


def _trickle_until_closed(sock: socket.socket, seconds: float = 30) -> bytes | None:
    """Send a byte every 0.2 s, as a slow client does; what the server sent before closing,
    or None if the connection is still open after ``seconds``."""
    deadline = time.monotonic() + seconds
    received = b""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            sock.sendall(b" ")
        answer = closed_within(sock, 0.2)
        if answer is not None:
            return received + answer
    return None


def test_regression_slow_body_is_closed(servers: LiveServerFactory) -> None:
    """Headers complete, then the body at a byte a second, held the
    connection for good (every byte cancelled uvicorn's keep-alive timer, and the header timer
    had stopped at the end of the headers) — after a 401, after ``/healthz``'s 200, and while
    the app waited for the body. 20 such sockets at ``max_connections`` 20 locked everyone out.
    """
    # Body timeout far away: only the "answered before the body was read" rule can close these.
    server = servers(body_timeout=600, keep_alive_timeout=600, max_connections=20)
    api = f"/api/v1/workspaces/{server.workspace_id}/jobs"
    for method, path, status in (
        ("POST", api, b"HTTP/1.1 401 "),
        ("GET", "/healthz", b"HTTP/1.1 200 "),
    ):
        sock = _slow_request(server, path, api_key=None, method=method)
        answer = _trickle_until_closed(sock)
        sock.close()
        assert answer is not None, f"{path}: a slow body kept the connection open after its answer"
        assert answer.startswith(status), answer

    # The app waits for the body of an authenticated request: such connections make room at
    # the cap as idle ones do (the one sending its body longest goes first).
    agent = server.create_agent("slow")
    enqueue = f"/api/v1/workspaces/{server.workspace_id}/job-agents/{agent}/jobs"
    slow = [_slow_request(server, enqueue, api_key=server.api_key) for _ in range(20)]
    wait_until(lambda: _server_read_everything(server, slow), what="the server to read them")
    assert _healthz(server) == 200
    readable, _, _ = select.select(slow, [], [], 30)
    assert readable, "no slow body was closed to make room at the cap"
    assert closed_within(readable[0], 30) == b""
    for sock in slow:
        sock.close()

    # A body that never completes is cut off after body_timeout.
    server.stop()
    server = servers(body_timeout=1, keep_alive_timeout=600)
    agent = server.create_agent("slow")
    sock = _slow_request(
        server,
        f"/api/v1/workspaces/{server.workspace_id}/job-agents/{agent}/jobs",
        api_key=server.api_key,
    )
    answer = _trickle_until_closed(sock)
    sock.close()
    assert answer == b"", answer


def test_refusals_at_the_cap_are_logged_once_per_window(servers: LiveServerFactory) -> None:
    """With every connection busy (long-polls), new ones are closed at once; the log says so in
    one line, then one line with the count, not a line per connection."""
    server = servers(max_connections=20, max_wait_seconds=600, keep_alive_timeout=600)
    agent = server.create_agent("poller")
    path = f"/api/v1/workspaces/{server.workspace_id}/job-agents/{agent}/claim"
    body = json.dumps({"waitSeconds": 300, "leaseSeconds": 30}).encode()
    polls = []
    for _ in range(20):
        sock = _connect(server)
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {server.api_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        polls.append(sock)
    wait_until(lambda: _server_read_everything(server, polls), what="the long-polls to be read")
    for _ in range(5):
        refused = _connect(server)
        assert closed_within(refused, 30) is not None, "a connection over the cap was kept"
        refused.close()
    first = "none idle: closing a new one"
    more = "closed 4 more new connections in the last 10 s"
    wait_until(lambda: more in server.log(), what="the refusals' count line")
    assert server.log().count(first) == 1, server.log()
    for sock in polls:
        sock.close()


def test_without_httptools_the_server_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn's h11 protocol has no header or body timeout and no connection cap."""
    monkeypatch.setitem(sys.modules, "httptools", None)  # import httptools → ImportError
    with pytest.raises(ConfigError, match="httptools is not installed"):
        _protocol_options(ServerSettings(database="sqlite:///unused.db"))


# Requests the HTTP parser cannot read: a malformed Transfer-Encoding (what schemathesis once
# sent), smuggling-shaped framing, a bad chunk size, a bad header name, a garbage request line.
UNPARSABLE = {
    "transfer-encoding not chunked last": b"POST /api/v1/workspaces HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked, identity\r\n\r\n",
    "content-length and chunked": b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "bad chunk size": b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"zz\r\n",
    "bad header name": b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    "garbage request line": b"\x00\x01\x02 what\r\n\r\n",
}


def test_an_unparsable_request_gets_the_json_error_shape(servers: LiveServerFactory) -> None:
    """uvicorn answered these 400 text/plain "Invalid HTTP request received.", outside the
    documented error shape: now 400 with the JSON error body, and the connection closed."""
    server = servers()
    for name, raw in UNPARSABLE.items():
        sock = _connect(server)
        sock.sendall(raw)
        received = closed_within(sock, 30)
        sock.close()
        assert received is not None, f"{name}: still open"
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0] == "HTTP/1.1 400 Bad Request", (name, received)
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        assert headers["content-type"] == "application/json", (name, headers)
        assert headers["connection"] == "close"
        assert int(headers["content-length"]) == len(body)
        assert json.loads(body) == {
            "message": "malformed HTTP request",
            "code": "VALIDATION_ERROR",
            "details": None,
        }, name
    assert _healthz(server) == 200
