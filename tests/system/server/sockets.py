"""Raw-socket helpers of the edge tests, plain TCP and TLS alike."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time

__all__ = ["closed_within", "trickled_until_closed"]


def closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """Everything the server sent before closing, or None if still open after ``seconds``.

    A reset, or a TLS connection ended without (or with) its close-notify, counts as closed.
    """
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
    except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
        return received


def trickled_until_closed(sock: socket.socket, seconds: float = 30.0) -> bytes | None:
    """Send a header one byte at a time until the server closes: what it sent before it
    closed, or None if it is still open after ``seconds``."""
    closed = None
    deadline = time.monotonic() + seconds
    while closed is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            sock.sendall(b"X")  # keeps trickling: the header timeout must still fire
        closed = closed_within(sock, 0.2)
    return closed
