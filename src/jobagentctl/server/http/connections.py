"""Connection limits of the HTTP server, below the ASGI app: they act before any request exists.

uvicorn's httptools protocol lacks four limits:

- a cap on the request line and headers: the parser buffers a 50 MB header value;
- a timeout while headers or a body arrive: a client sending one byte a second holds its
  connection forever. Every byte cancels the keep-alive timer, re-armed only when a response ends;
- a timeout before a new connection's first request;
- a cap on open connections.

:func:`guarded_protocol` subclasses it with all of them:

- **Header cap**: the request line plus headers of one request may take at most
  ``max_header_bytes``. One byte more is answered ``431`` (``HEADERS_TOO_LARGE``) and the
  connection closed, before the parser buffers it (counted in ``data_received``).
- **Header timeout**: from a request's first byte its headers must be complete within
  ``header_timeout`` seconds, else the connection is closed.
- **Body timeout**: from the end of a request's headers its body must be complete within
  ``body_timeout`` seconds, else the connection is closed. A response sent before the body is
  complete (a 401, ``/healthz``) closes the connection once written. Nothing of the rest of the
  body is needed, and a body trickling in after it would keep the connection forever.
- **Idle timeout**: a connection waiting for its first request, or between requests, is closed
  after ``keep_alive_timeout`` seconds (uvicorn's own keep-alive timer, also armed at connect).
  Once it has carried a request with a valid API key, the bound is
  ``keyed_keep_alive_timeout`` seconds. An agent heartbeats every lease/3 (20 s by default).
  A connection closed between two heartbeats costs a new TCP connection per heartbeat, and over
  TLS a handshake. Only a valid key earns it. Such idle connections are still the first closed
  at the cap, so they cannot crowd anyone out.
- **Connection cap**: beyond ``max_connections`` open connections, one is closed to make room.
  That is one that serves no request (idle, or still sending headers), else one still sending
  its body. When every one is busy, the new one is closed at once. That is logged once per
  ``_REFUSAL_LOG_SECONDS`` with a count, not once per connection. :func:`raise_fd_limit` lifts
  the soft descriptor limit to the hard one at start. The cap is kept below it
  (:func:`connection_cap`), so ``accept`` does not meet ``EMFILE``.
- **Unparsable requests** (a malformed request line, header or chunked framing, e.g. a bad
  ``Transfer-Encoding``) are answered ``400`` and the connection closed. The answer has the
  JSON error shape (``VALIDATION_ERROR``, message ``malformed HTTP request``); uvicorn's own
  answer is ``text/plain``.
- **TLS**: with a TLS context, each connection's handshake runs in a ``_Handshake`` layer below
  the HTTP protocol. The event loop's server would neither count handshakes against the cap nor
  let their timeout be chosen. A handshake counts against the cap from its first byte, and is
  the first thing closed to make room. One not finished within ``header_timeout`` is cut off
  like a slow header. The HTTP protocol above sees decrypted bytes, so every limit above holds
  unchanged over TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from jobagentctl.server.http.encoding import error_bytes

if TYPE_CHECKING:
    import ssl

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
else:  # uvicorn's protocol is imported when a server is made, not with this module
    _Base = object

__all__ = [
    "COUNTS",
    "MALFORMED_MESSAGE",
    "EdgeCounts",
    "EdgeLimits",
    "connection_cap",
    "guarded_protocol",
    "listen_backlog",
    "raise_fd_limit",
]

logger = logging.getLogger("jobagentctl.server")

# The listen queue: connections the kernel holds until the event loop accepts them. A fleet
# reconnecting (thousands of agents, a heartbeat on a new connection every few seconds) overflows
# a short one while the loop is busy, and each dropped SYN costs its client 1 s, then 3 s, 7 s…
# (benchmarks.fleet: 10,000 agents, pickup p99 2.3 s with 128, 0.24 s with 2,048). Linux caps
# it at net.core.somaxconn. It is also one batch of accepts: the event loop accepts up to that
# many connections before the cap sees any of them, and as many evicted ones may still hold
# their descriptors until the next loop iteration, so the descriptors kept free for them (and
# for everything that is not a client connection: the listening socket, the database pool and
# LISTEN connection, log files, the SQLite WAL, …) grow with it: it is bounded by the fd limit.
MIN_BACKLOG = 128
MAX_BACKLOG = 2048
_FD_RESERVE_BASE = 128
# At the cap with every connection busy, each refused connection would log a line: a flood
# would grow the log by megabytes. One line at the first refusal, then one per this many seconds
# with the count.
_REFUSAL_LOG_SECONDS = 10.0
# The scope key under which the edge puts an authenticated request's principal (edge.PRINCIPAL;
# not imported: the edge imports the metrics, which read this module's counts).
PRINCIPAL = "jobagentctl.principal"
# After a TLS connection is closed, how long the peer's close_notify is awaited before the
# socket is dropped (asyncio's default is 30 s: a closed connection would hold a place under
# the cap that long, out of the eviction's reach).
_TLS_SHUTDOWN_SECONDS = 5.0
# How much one read of a TLS socket may take: asyncio's own size, in one buffer per server.
_TLS_READ_BUFFER = 256 * 1024


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The connection limits of one server (see the module docstring)."""

    max_header_bytes: int
    header_timeout: float
    keep_alive_timeout: float
    max_connections: int
    body_timeout: float = 30.0
    # Idle timeout of a connection that has carried a valid API key; 0: keep_alive_timeout.
    keyed_keep_alive_timeout: float = 0.0


class EdgeCounts:
    """What this process's servers have accepted since it started (``/metrics``): connections
    that reached the HTTP protocol, and TLS handshakes, full or resumed. A heartbeat that needs a
    new connection, or a full handshake, is a cost the request counters do not show."""

    __slots__ = ("connections", "tls_full", "tls_resumed")

    def __init__(self) -> None:
        self.connections = 0
        self.tls_full = 0
        self.tls_resumed = 0


COUNTS = EdgeCounts()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return ``(soft, hard)`` after."""
    try:
        import resource
    except ImportError:  # not POSIX
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        logger.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft, hard
    return target, hard


def listen_backlog(soft_fd_limit: int) -> int:
    """The listen queue's length for a process with that descriptor limit. Up to
    :data:`MAX_BACKLOG`, so long as what it reserves stays within half of the limit."""
    if soft_fd_limit <= 0:
        return MIN_BACKLOG
    return max(MIN_BACKLOG, min(MAX_BACKLOG, (soft_fd_limit - _FD_RESERVE_BASE) // 4))


def connection_cap(max_connections: int, soft_fd_limit: int) -> int:
    """The effective cap: the setting, kept below the fd limit. The margin is what the rest of the
    process and one batch of accepts reserve (:func:`listen_backlog`)."""
    if soft_fd_limit <= 0:
        return max_connections
    reserve = _FD_RESERVE_BASE + 2 * listen_backlog(soft_fd_limit)
    return max(1, min(max_connections, soft_fd_limit - reserve))


def _431() -> bytes:
    body = error_bytes("request line and headers too large", "HEADERS_TOO_LARGE", None)
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n"
        b"connection: close\r\n\r\n"
    )
    return head + body


_RESPONSE_431 = _431()

# The answer to bytes the HTTP parser cannot read: nothing of the request is known (not even
# its path), so the body names no field.
MALFORMED_MESSAGE = "malformed HTTP request"
_BODY_400 = error_bytes(MALFORMED_MESSAGE, "VALIDATION_ERROR", None)


class _Refusals:
    """Connections refused at the cap. The first is logged at once, later ones as one line per
    ``_REFUSAL_LOG_SECONDS`` with their count. A flood must not grow the log per connection."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._count = 0
        self._window: asyncio.TimerHandle | None = None

    def note(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._window is not None:
            self._count += 1
            return
        logger.warning("open connections at the cap (%d), none idle: closing a new one", self._cap)
        self._window = loop.call_later(_REFUSAL_LOG_SECONDS, self._flush, loop)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        self._window = None
        if self._count:
            logger.warning(
                "open connections at the cap (%d), none idle: closed %d more new connections "
                "in the last %g s",
                self._cap,
                self._count,
                _REFUSAL_LOG_SECONDS,
            )
            self._count = 0
            # Still refusing, perhaps: the next ones are counted in another window.
            self._window = loop.call_later(_REFUSAL_LOG_SECONDS, self._flush, loop)


class _Server:
    """One server's limits and the connections its cap may close to make room, least recently active
    first. First those serving no request (idle, or still sending headers), then those still sending
    a request body."""

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        # TLS connections still in their handshake: the HTTP protocol waiting above each one,
        # and the socket's transport (the one to abort).
        self.handshaking: OrderedDict[_Guarded, asyncio.Transport] = OrderedDict()
        self.idle: OrderedDict[_Guarded, None] = OrderedDict()
        self.receiving: OrderedDict[_Guarded, None] = OrderedDict()
        self.refusals = _Refusals(limits.max_connections)

    def evict_one(self) -> bool:
        """Make room by closing one connection, the first of:

        - the oldest still in its TLS handshake;
        - the least recently active idle one;
        - the one sending its body longest.

        A flood churns its own connections, not those of a client that has just connected."""
        while self.handshaking:
            _, raw = self.handshaking.popitem(last=False)
            if not raw.is_closing():
                raw.abort()
                return True
        for line in (self.idle, self.receiving):
            while line:
                oldest, _ = line.popitem(last=False)
                if not oldest.transport.is_closing():
                    oldest.transport.abort()
                    oldest.connections.discard(oldest)
                    return True
        return False


class _Guarded(_Base):
    """The limits, on top of uvicorn's httptools protocol (the class :func:`guarded_protocol`
    makes puts this first in its bases)."""

    _server: _Server  # set on the class guarded_protocol makes, one per server
    _awaiting_headers = True
    _body_pending = False  # headers parsed, body not yet complete
    _keyed = False  # has carried a request with a valid API key
    _header_bytes = 0
    _tail = b""
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        server = self._server
        server.handshaking.pop(self, None)  # over TLS: its place under the cap is kept
        super().connection_made(transport)
        COUNTS.connections += 1
        opened = len(self.connections) + len(server.handshaking)
        if opened > server.limits.max_connections and not server.evict_one():
            server.refusals.note(self.loop)
            self.connections.discard(self)
            transport.abort()
            return
        server.idle[self] = None
        # The first request is awaited like the next one on a kept-alive connection.
        self.timeout_keep_alive_task = self.loop.call_later(
            server.limits.keep_alive_timeout, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.idle.pop(self, None)
        self._server.receiving.pop(self, None)
        self._cancel_header_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        if self._body_pending and not self.transport.is_closing():
            # Answered before its body was read (401, /healthz): the rest of the body is not
            # wanted, and trickling it would keep the connection open for good (each byte
            # cancels the keep-alive timer). Close once the response is written.
            self.transport.close()
        if not self._keyed and self.cycle is not None and PRINCIPAL in self.cycle.scope:
            # The edge authenticated this request (it puts the principal in the scope, which
            # uvicorn shares with the app): from now on the connection waits for the agent's
            # next heartbeat. uvicorn arms its idle timer with this attribute.
            self._keyed = True
            limits = self._server.limits
            self.timeout_keep_alive = max(  # type: ignore[assignment]  # uvicorn says int
                limits.keep_alive_timeout, limits.keyed_keep_alive_timeout
            )
        super().on_response_complete()
        if not self.transport.is_closing() and self._awaiting_headers:
            self._server.idle[self] = None  # the most recently active end of the line

    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # refused or lost: nothing more is read
            return
        limits = self._server.limits
        if self._awaiting_headers:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(
                    limits.header_timeout, self._header_timeout
                )
            allowance = limits.max_header_bytes - self._header_bytes
            if len(data) > allowance:
                window = self._tail + data[: max(allowance, 0)]
                if b"\r\n\r\n" not in window and b"\n\n" not in window:
                    self._refuse_headers()
                    return
            self._header_bytes += len(data)
            self._tail = data[-3:]
        super().data_received(data)
        if self._body_pending and self._body_timer is None and self.parser is not None:
            # Armed only when a body spans more than one read: most arrive with their headers
            # and cost no timer.
            self._body_timer = self.loop.call_later(limits.body_timeout, self._body_timeout)
            self._server.receiving[self] = None

    def on_headers_complete(self) -> None:
        self._server.idle.pop(self, None)
        self._awaiting_headers = False
        self._body_pending = True
        self._header_bytes = 0
        self._tail = b""
        self._cancel_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._body_pending = False
        self._cancel_body_timer()
        self._server.receiving.pop(self, None)
        self._awaiting_headers = True  # whatever comes next starts another request

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self.transport.close()

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self._body_pending and not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """The parser's refusal (uvicorn calls it, then stops reading), as our JSON error."""
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(_BODY_400)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
                _BODY_400,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()

    def _refuse_headers(self) -> None:
        self._cancel_header_timer()
        self._awaiting_headers = False
        self.parser = None  # type: ignore[assignment]  # nothing more is parsed
        if not self.transport.is_closing():
            self.transport.write(_RESPONSE_431)
            self.transport.close()


def guarded_protocol(
    limits: EdgeLimits, tls: ssl.SSLContext | None = None
) -> Callable[..., asyncio.BaseProtocol]:
    """uvicorn's httptools protocol with ``limits`` (see the module docstring): a class per
    server, so that each server's cap sees only its own connections. With a ``tls`` context,
    a factory of the same signature that puts each connection's handshake below it."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    server = _Server(limits)
    guarded: type[_Guarded] = type(
        "GuardedHttpToolsProtocol", (_Guarded, HttpToolsProtocol), {"_server": server}
    )
    if tls is None:
        return guarded
    handshake = _handshake_class(server, tls)

    def tls_protocol(**options: Any) -> asyncio.BaseProtocol:
        return handshake(guarded(**options))

    return tls_protocol


def _handshake_class(
    server: _Server, context: ssl.SSLContext
) -> Callable[[_Guarded], asyncio.BaseProtocol]:
    """The TLS layer of one server: asyncio's own TLS protocol, the one the event loop would use. It
    is admitted under the cap when the socket connects, and timed out like a slow header."""
    import ssl
    from asyncio.sslproto import SSLProtocol

    # One read buffer for every connection of this server. asyncio gives each connection its
    # own zero-filled 256 KiB buffer: resident memory, 2.5 GiB for 10,000 kept connections.
    # The loop reads one socket at a time, and ``buffer_updated`` copies what was read into
    # that connection's TLS input before the loop reads another, so one buffer serves all.
    shared = bytearray(_TLS_READ_BUFFER)
    shared_view = memoryview(shared)

    class _Handshake(SSLProtocol):
        """One connection's TLS, below the HTTP protocol ``app``. It counts under the cap from the
        first byte. The HTTP protocol takes its place there once the handshake is done."""

        def __init__(self, app: _Guarded) -> None:
            options: dict[str, Any] = {
                "waiter": None,  # nobody awaits the handshake: the HTTP protocol is told
                "server_side": True,
                "ssl_handshake_timeout": server.limits.header_timeout,
                "ssl_shutdown_timeout": _TLS_SHUTDOWN_SECONDS,
            }
            super().__init__(app.loop, app, context, **options)
            # asyncio's own attributes, which its stubs do not declare: the buffer it just made
            # is dropped for the shared one.
            state: Any = self
            state._ssl_buffer, state._ssl_buffer_view = shared, shared_view
            self._app = app

        def get_buffer(self, n: int) -> memoryview:
            return shared_view

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            raw = cast(asyncio.Transport, transport)
            opened = len(self._app.connections) + len(server.handshaking) + 1
            if opened > server.limits.max_connections and not server.evict_one():
                server.refusals.note(self._app.loop)
                raw.abort()
                return
            server.handshaking[self._app] = raw
            super().connection_made(raw)

        def connection_lost(self, exc: BaseException | None) -> None:
            server.handshaking.pop(self._app, None)
            super().connection_lost(exc)

        def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
            state: Any = self  # asyncio's own attributes, which its stubs do not declare
            if handshake_exc is None and state._sslobj is not None:
                if state._sslobj.session_reused:
                    COUNTS.tls_resumed += 1
                else:
                    COUNTS.tls_full += 1
            super()._on_handshake_complete(handshake_exc)

        def _do_shutdown(self) -> None:
            # Send our close_notify and close, as TLS allows: asyncio would wait for the
            # client's, which an idle client in a pool sends only when it next reads, so every
            # connection closed for idleness (or at shutdown) would linger up to
            # _TLS_SHUTDOWN_SECONDS under the cap, out of the eviction's reach.
            state: Any = self  # asyncio's own attributes, which its stubs do not declare
            if not state._eof_received:
                with contextlib.suppress(ssl.SSLError):  # SSLWantRead: the client's, unread
                    state._sslobj.unwrap()
            state._process_outgoing()
            state._on_shutdown_complete(None)

    return _Handshake
