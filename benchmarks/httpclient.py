"""A minimal asyncio HTTP/1.1 keep-alive client for load generation.

httpx saturates a core at a few hundred requests/s on this machine, which would measure the
load generator instead of the server; this client does just enough HTTP for our own server:
one request at a time per connection, Content-Length bodies, no redirects. An https:// URL
is spoken over TLS trusting the CA file named by ``JOBAGENTCTL_BENCH_CA`` (asyncio's TLS: each
connection a full handshake, as asyncio cannot offer a session).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from functools import cache
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Connection", "HTTPError"]


class HTTPError(Exception):
    pass


def _context() -> ssl.SSLContext:
    return _context_for(os.environ.get("JOBAGENTCTL_BENCH_CA"))


@cache
def _context_for(cafile: str | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


class Connection:
    """One keep-alive connection; ``request`` is not safe to call concurrently."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._host = host

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        host = parts.hostname or "127.0.0.1"
        tls = _context() if parts.scheme == "https" else None
        port = parts.port or (443 if tls else 80)
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        payload = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}"]
        for key, text in (headers or {}).items():
            lines.append(f"{key}: {text}")
        if body is not None:
            lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(payload)}")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, _, rest = head.partition(b"\r\n")
        try:
            status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError) as exc:
            raise HTTPError(f"bad status line {status_line!r}") from exc
        length = 0
        chunked = False
        for line in rest.split(b"\r\n"):
            name, _, value = line.partition(b":")
            lname = name.strip().lower()
            if lname == b"content-length":
                length = int(value.strip())
            elif lname == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if chunked:
            return status, await self._read_chunked()
        data = await self._reader.readexactly(length) if length else b""
        return status, data

    async def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size_line = await self._reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return bytes(out)
            out += await self._reader.readexactly(size)
            await self._reader.readexactly(2)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
