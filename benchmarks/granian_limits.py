"""Which of the edge's connection limits hold when granian serves the app instead of uvicorn.

Usage: python -m benchmarks.granian_limits   (needs ``pip install granian``; SQLite, ~30 s)

Serves ``create_app`` with granian's closest settings to ours (read buffer = the 16 KiB header
cap, header read timeout 1 s, backpressure 20; 60 s for the cap's probe, as its test) and
probes it as tests/security/test_edge_limits.py and tests/server/test_edge.py probe
``server start``: prints one line per limit with what granian did.
The uvicorn side is held by those tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

from benchmarks.common import cli, free_port, wait_for_port

HEADER_CAP = 16 * 1024


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    sock.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return got
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        return got


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _trickle(sock: socket.socket, byte: bytes, seconds: float) -> float | None:
    """Send ``byte`` every 0.2 s; seconds until the server closed, None if it did not."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        with contextlib.suppress(OSError):
            sock.sendall(byte)
        if _closed_within(sock, 0.2) is not None:
            return time.monotonic() - t0
    return None


class Probe:
    """Raw HTTP/1.1 against one server on ``port`` with API key ``key``."""

    def __init__(self, port: int, key: str) -> None:
        self.port, self.key = port, key

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def head(self, method: str, path: str, length: int, close: bool = False) -> bytes:
        tail = "Connection: close\r\n" if close else ""
        return (
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {self.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n{tail}\r\n"
        ).encode()

    def request(self, method: str, path: str, body: object = None) -> tuple[bytes, object]:
        data = b"" if body is None else json.dumps(body).encode()
        sock = self.connect()
        sock.sendall(self.head(method, path, len(data), close=True) + data)
        answer = _closed_within(sock, 30) or b""
        sock.close()
        status, _, payload = answer.partition(b"\r\n\r\n")
        return status[:12], json.loads(payload) if payload else None


def _checks(p: Probe, ws: str) -> list[tuple[str, Callable[[], str]]]:
    api = f"/api/v1/workspaces/{ws}"
    agent = str(uuid.uuid4())
    p.request("PUT", f"{api}/job-agents/{agent}", {"name": "p", "type": "p"})

    def header_cap() -> str:
        sock = p.connect()
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
        sock.sendall(head + b"a" * (HEADER_CAP + 1 - len(head)))
        answer = _closed_within(sock, 10) or b""
        sock.close()
        coded = b"HEADERS_TOO_LARGE" in answer
        return f"{answer[:12].decode(errors='replace')!r}, error code in body: {coded}"

    def idle() -> str:
        sock = p.connect()
        closed = _closed_within(sock, 8)
        return "open after 8 s" if closed is None else "closed (header read timeout, 1 s)"

    def trickled_headers() -> str:
        sock = p.connect()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        after = _trickle(sock, b"X", 8)
        return "open after 8 s" if after is None else f"closed after {after:.1f} s"

    def trickled_body() -> str:
        sock = p.connect()
        sock.sendall(p.head("POST", f"{api}/job-agents/{agent}/jobs", 100) + b"{")
        after = _trickle(sock, b" ", 8)
        return "open after 8 s" if after is None else f"closed after {after:.1f} s"

    def long_poll_left() -> str:
        body = json.dumps({"waitSeconds": 20, "leaseSeconds": 60}).encode()
        sock = p.connect()
        sock.sendall(p.head("POST", f"{api}/job-agents/{agent}/claim", len(body)) + body)
        time.sleep(1.0)  # the long-poll is waiting; then its client leaves
        sock.close()
        time.sleep(1.0)
        _, job = p.request("POST", f"{api}/job-agents/{agent}/jobs", {})
        assert isinstance(job, dict)
        time.sleep(1.0)
        _, after = p.request("GET", f"{api}/jobs/{job['id']}")
        assert isinstance(after, dict)
        return f"job enqueued after the client left is {after['status']}"

    return [
        ("header cap (431 + HEADERS_TOO_LARGE)", header_cap),
        ("idle timeout, separate from the header timeout", idle),
        ("header timeout, trickled headers", trickled_headers),
        ("body timeout, trickled body", trickled_body),
        ("long-poll sees the client leave", long_poll_left),
    ]


def _cap(p: Probe) -> str:
    # As the cap's test: idle connections past the limit (backpressure 20, timeouts 60 s).
    idle = [p.connect() for _ in range(40)]
    status, _ = p.request("GET", "/healthz")
    left_open = sum(_still_open(s) for s in idle)
    for sock in idle:
        sock.close()
    return f"40 idle connections: {left_open} kept open; a new client got {status!r}"


@contextlib.contextmanager
def _granian(db: str, header_timeout_ms: int) -> Iterator[int]:
    port = free_port()
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--http", "1", "--no-ws"]
    argv += ["--http1-buffer-size", str(HEADER_CAP)]
    argv += ["--http1-header-read-timeout", str(header_timeout_ms)]
    argv += ["--backpressure", "20", "--log-level", "warning"]
    proc = subprocess.Popen(
        [*argv, "jobagentctl.server.app:create_app"],
        env={**os.environ, "JOBAGENTCTL_SERVER_DATABASE": db},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(proc, port)
        yield port
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/limits.db"
        init = json.loads(cli("server", "init", "--database", db, "-o", "json"))
        key, ws = init["apiKey"], init["workspaceId"]
        print("| limit | granian |")
        print("|---|---|")
        with _granian(db, 1000) as port:
            for name, check in _checks(Probe(port, key), ws):
                print(f"| {name} | {check()} |")
        with _granian(db, 60_000) as port:
            print(f"| connection cap (evict the oldest idle) | {_cap(Probe(port, key))} |")


if __name__ == "__main__":
    main()
