"""A forwarding HTTP proxy in front of a live server that answers some requests late (a slow
server, as the agent sees it), and records when each request came.

Threaded: a request held up does not hold up the others — the proxy must not be the queue the
test is about.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["SlowProxy", "slow_proxy"]


class SlowProxy:
    """What the proxy saw: ``(monotonic time, method, path)`` per request, in arrival order."""

    def __init__(
        self,
        delay: Callable[[str, str, int], float],
        refuse: Callable[[str, str, int], int | None],
    ) -> None:
        self.delay = delay  # (method, path, n-th such request) → seconds to hold it
        self.refuse = refuse  # … → a status to answer at once instead (a server that is down)
        self.seen: list[tuple[float, str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def times(self, suffix: str) -> list[float]:
        """When requests whose path ends with ``suffix`` arrived."""
        with self.lock:
            return [at for at, _, path in self.seen if path.split("?")[0].endswith(suffix)]


@contextmanager
def slow_proxy(
    target: str,
    delay: Callable[[str, str, int], float] = lambda method, path, n: 0.0,
    refuse: Callable[[str, str, int], int | None] = lambda method, path, n: None,
) -> Iterator[SlowProxy]:
    """A proxy to ``target`` (``http://host:port…``) on a free local port, for the block."""
    proxy = SlowProxy(delay, refuse)
    upstream = urlsplit(target)

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            with proxy.lock:
                proxy.seen.append((time.monotonic(), self.command, self.path))
                n = sum(1 for _, m, p in proxy.seen if (m, p) == (self.command, self.path))
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = proxy.refuse(self.command, self.path.split("?")[0], n)
            if status is not None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            hold = proxy.delay(self.command, self.path.split("?")[0], n)
            if hold:
                time.sleep(hold)  # the slow server itself
            conn = http.client.HTTPConnection(
                upstream.hostname or "127.0.0.1", upstream.port, timeout=60
            )
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
            finally:
                conn.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _forward

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    base_path = upstream.path.rstrip("/")
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}{base_path}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
