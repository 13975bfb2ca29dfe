"""The ``--debug`` HTTP trace: one line per request and response, secrets redacted.

Hooked into httpx's event hooks; the key header's value never reaches the sink.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import httpx

__all__ = ["Tracer"]

_BODY_LIMIT = 2000
REDACTED = "<redacted>"


class Tracer:
    """Writes a readable trace of each exchange to ``sink`` (stderr in the CLI)."""

    def __init__(self, sink: Callable[[str], None], *, redact: Iterable[str]) -> None:
        self._sink = sink
        self._redact = {name.lower() for name in redact}
        self._started: dict[int, float] = {}

    def _headers(self, headers: httpx.Headers) -> str:
        return ", ".join(
            f"{name}: {REDACTED if name.lower() in self._redact else value}"
            for name, value in headers.items()
        )

    def request(self, request: httpx.Request) -> None:
        """httpx's ``request`` hook: the method and URL, the headers, the body (clipped)."""
        self._started[id(request)] = time.monotonic()
        self._sink(f"> {request.method} {request.url}")
        self._sink(f"> {self._headers(request.headers)}")
        body = request.content
        if body:
            self._sink(f"> {_clip(body)}")

    def response(self, response: httpx.Response) -> None:
        """httpx's ``response`` hook: the status and the time it took, the headers, the body."""
        started = self._started.pop(id(response.request), None)
        took = f" in {time.monotonic() - started:.3f}s" if started is not None else ""
        response.read()
        self._sink(f"< {response.status_code} {response.reason_phrase}{took}")
        self._sink(f"< {self._headers(response.headers)}")
        if response.content:
            self._sink(f"< {_clip(response.content)}")


def _clip(body: bytes) -> str:
    text = body[:_BODY_LIMIT].decode("utf-8", "replace")
    return text + (f"… ({len(body)} bytes)" if len(body) > _BODY_LIMIT else "")
