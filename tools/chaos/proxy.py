"""A fault-injecting HTTP/1.1 proxy between the chaos agents and the server(s), and their witness.

Faults land between messages (drop, reset before or after the server acted, late delivery);
every exchange is recorded, so the checker sees what the server accepted even when agents did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any, Literal

__all__ = ["Exchange", "FaultProxy", "ProxyFault", "exchange_from_json"]

FaultKind = Literal["drop", "reset", "delay"]

_MAX_HEAD = 64 * 1024
# A response slower than this is not coming (the longest legitimate one is a 30 s long-poll).
_UPSTREAM_READ_TIMEOUT = 120.0
_CONNECT_TIMEOUT = 3.0


@dataclass(frozen=True)
class ProxyFault:
    """A fault window: each request of a targeted slot is hit with ``probability``.

    ``drop``: the connection is closed before the request is forwarded (the server never sees
    it). ``reset``: a TCP reset, half the time before forwarding, half after the server answered
    (the server acted; the agent does not know). ``delay``: the request (or, half the time, the
    response) is held ``delay`` seconds; a held request is delivered even if the agent gave up.
    """

    kind: FaultKind
    probability: float
    label: str
    slots: frozenset[int] | None = None  # None: every slot
    delay: tuple[float, float] = (0.0, 0.0)

    def targets(self, slot: int) -> bool:
        return self.slots is None or slot in self.slots


@dataclass
class Exchange:
    """One request seen by the proxy and what became of it. Times are wall-clock seconds
    (comparable with the database clock on this machine)."""

    slot: int
    method: str
    path: str
    request: dict[str, Any] | None
    t_recv: float
    upstream: int | None = None
    t_fwd: float | None = None  # the whole request was handed to the server
    t_resp: float | None = None  # the whole response came back
    status: int | None = None
    response: dict[str, Any] | None = None
    fault: str | None = None
    # The response was handed to the client's socket (a client that already gave up and
    # closed may still be counted: the kernel takes the bytes before the reset comes back).
    delivered: bool = False

    @property
    def forwarded(self) -> bool:
        return self.t_fwd is not None

    @property
    def claim_id(self) -> str | None:
        value = (self.request or {}).get("claimId")
        return str(value) if value else None

    @property
    def error_code(self) -> str | None:
        value = (self.response or {}).get("code")
        return str(value) if isinstance(value, str) else None

    def to_json(self) -> dict[str, Any]:
        """The exchange as one line of a dumped run (camelCase, as the API's own names)."""
        return {name: getattr(self, field) for field, name in _JSON_NAMES.items()}


# Each field of an Exchange and its name in a dumped run, both ways.
_JSON_NAMES = {
    f.name: re.sub(r"_(\w)", lambda m: m.group(1).upper(), f.name) for f in fields(Exchange)
}


@dataclass
class _Message:
    start: str
    headers: dict[str, str]
    raw: bytes
    body: bytes

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


class _Closed(Exception):
    """The peer closed the connection between messages."""


async def _read_message(
    reader: asyncio.StreamReader, *, request: bool, method: str = ""
) -> _Message:
    """One HTTP/1.1 message, raw bytes kept for forwarding. ``_Closed`` on a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Closed from None
        raise ConnectionError("connection closed inside a message head") from exc
    except asyncio.LimitOverrunError as exc:
        raise ConnectionError("message head too large") from exc
    lines = head[:-4].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = 0
    if not request:
        with contextlib.suppress(IndexError, ValueError):
            status = int(lines[0].split(" ", 2)[1])
    no_body = not request and (method == "HEAD" or status in (204, 304) or 100 <= status < 200)
    raw = bytearray(head)
    body = bytearray()
    if no_body:
        pass
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        await _read_chunked(reader, raw, body)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        chunk = await reader.readexactly(length) if length else b""
        raw += chunk
        body += chunk
    elif not request:
        chunk = await reader.read()  # delimited by the end of the connection
        raw += chunk
        body += chunk
        headers["connection"] = "close"
    return _Message(lines[0], headers, bytes(raw), bytes(body))


async def _read_chunked(reader: asyncio.StreamReader, raw: bytearray, body: bytearray) -> None:
    """A chunked body: its bytes as sent onto ``raw``, the decoded body onto ``body``."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        raw += size_line
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            # Trailers (none from our server) end with an empty line.
            while True:
                trailer = await reader.readuntil(b"\r\n")
                raw += trailer
                if trailer == b"\r\n":
                    return
        chunk = await reader.readexactly(size + 2)
        raw += chunk
        body += chunk[:-2]


async def _forward(
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    request: _Message,
    method: str,
    ex: Exchange,
) -> _Message | None:
    """``request`` sent to the server and its answer; None when the server went away."""
    up_reader, up_writer = upstream
    try:
        up_writer.write(request.raw)
        await up_writer.drain()
        ex.t_fwd = time.time()
        return await asyncio.wait_for(
            _read_message(up_reader, request=False, method=method), _UPSTREAM_READ_TIMEOUT
        )
    except (_Closed, ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
        return None


async def _deliver(
    writer: asyncio.StreamWriter,
    response: _Message,
    ex: Exchange,
    hold_response: float,
    reset_after: bool,
) -> bool:
    """The answer handed to the client (held, or replaced by a reset, as the fault says);
    whether the connection lives on."""
    if reset_after:
        _reset(writer)
        return False
    if hold_response:
        await asyncio.sleep(hold_response)
    try:
        writer.write(response.raw)
        await writer.drain()
    except (ConnectionError, OSError):
        return False
    ex.delivered = True
    return True


def _json_or_none(data: bytes) -> dict[str, Any] | None:
    if not data or len(data) > 256 * 1024:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else {"_list": value}


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), the way a crashed middlebox or peer looks."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Run with :meth:`start` (its own thread and event loop) and :meth:`stop`.

    Messages are forwarded one at a time, so a fault hits a whole request: dropped before the
    server saw it, answered but reset before the agent heard (the server acted, the agent does
    not know), or delivered late — after its lease ran out, even after the client gave up.
    Each agent slot has a port of its own, so the record says which agent sent what; with
    several upstreams (replicas) slot ``n`` prefers replica ``n % count`` and fails over when
    it is down, as a load balancer would.

    The orchestrator sets :attr:`fault` (a :class:`ProxyFault` or None) from its own thread:
    the proxy reads it once per request, so one assignment switches a window on or off.
    """

    def __init__(
        self,
        upstreams: list[tuple[str, int]],
        slots: int,
        *,
        rng: random.Random,
        host: str = "127.0.0.1",
    ) -> None:
        self.upstreams = list(upstreams)
        self.slots = slots
        self.host = host
        self.ports: list[int] = []
        self.fault: ProxyFault | None = None
        self.exchanges: list[Exchange] = []
        self.applied: Counter[str] = Counter()  # fault label → requests hit
        self._rng = rng
        self._rng_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._main, name="chaos-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the proxy did not start")
        if self._error is not None:
            raise RuntimeError(f"the proxy failed to start: {self._error}")
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        for slot in range(self.slots):

            def accept(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: int = slot
            ) -> None:
                self._spawn(self._client(slot, reader, writer))

            server = await asyncio.start_server(
                accept,
                self.host,
                0,
                limit=_MAX_HEAD,
            )
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop.stop()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        self._thread.join(30)
        self._loop = None

    def url(self, slot: int) -> str:
        return f"http://{self.host}:{self.ports[slot]}"

    # --- decisions ---------------------------------------------------------------------------
    def _roll(self, probability: float) -> bool:
        with self._rng_lock:
            return self._rng.random() < probability

    def _uniform(self, low: float, high: float) -> float:
        with self._rng_lock:
            return self._rng.uniform(low, high)

    # --- one client connection ---------------------------------------------------------------
    async def _client(
        self, slot: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        upstream_index: int | None = None
        try:
            while True:
                try:
                    request = await _read_message(reader, request=True)
                except (_Closed, ConnectionError, asyncio.IncompleteReadError):
                    return
                method, _, rest = request.start.partition(" ")
                path = rest.rsplit(" ", 1)[0]
                ex = Exchange(
                    slot=slot,
                    method=method,
                    path=path,
                    request=_json_or_none(request.body),
                    t_recv=time.time(),
                )
                self.exchanges.append(ex)
                fault = self._fault_for(slot)
                hold_response = 0.0
                reset_after = False
                if fault is not None:
                    go_on, hold_response, reset_after = await self._before_forwarding(
                        fault, ex, writer
                    )
                    if not go_on:
                        return  # the finally closes the client connection (drop: a plain FIN)
                if upstream is None:
                    opened = await self._connect(slot)
                    if opened is None:
                        ex.fault = (ex.fault + "," if ex.fault else "") + "no_upstream"
                        _reset(writer)
                        return
                    upstream_index, upstream = opened
                ex.upstream = upstream_index
                response = await _forward(upstream, request, method, ex)
                if response is None:
                    # The server went away mid-exchange (a restart): so does the client's
                    # connection, as with a plain TCP proxy.
                    _reset(writer)
                    return
                ex.t_resp = time.time()
                with contextlib.suppress(IndexError, ValueError):
                    ex.status = int(response.start.split(" ", 2)[1])
                ex.response = _json_or_none(response.body)
                if not await _deliver(writer, response, ex, hold_response, reset_after):
                    return
                if not response.keep_alive or not request.keep_alive:
                    return
        except asyncio.CancelledError:
            _reset(writer)
            raise
        finally:
            if upstream is not None:
                upstream[1].close()
            writer.close()

    def _fault_for(self, slot: int) -> ProxyFault | None:
        """The fault this exchange meets, if any (counted as applied)."""
        fault = self.fault
        if fault is not None and not fault.targets(slot):
            fault = None
        if fault is not None and not self._roll(fault.probability):
            fault = None
        if fault is not None:
            self.applied[fault.label] += 1
        return fault

    async def _before_forwarding(
        self, fault: ProxyFault, ex: Exchange, writer: asyncio.StreamWriter
    ) -> tuple[bool, float, bool]:
        """``fault`` applied to a request: whether to forward it, how long to hold the
        answer, and whether to reset the connection once the answer came."""
        hold_response = 0.0
        reset_after = False
        if fault.kind == "drop":
            ex.fault = "drop"
            return False, hold_response, reset_after
        if fault.kind == "reset":
            if self._roll(0.5):
                ex.fault = "reset_before"
                _reset(writer)
                return False, hold_response, reset_after
            ex.fault = "reset_after"
            reset_after = True
        if fault.kind == "delay":
            seconds = self._uniform(*fault.delay)
            if self._roll(0.5):
                ex.fault = f"delay_request:{seconds:.2f}"
                await asyncio.sleep(seconds)
            else:
                ex.fault = f"delay_response:{seconds:.2f}"
                hold_response = seconds
        return True, hold_response, reset_after

    async def _connect(
        self, slot: int
    ) -> tuple[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None:
        """Open a connection to the slot's preferred upstream, else to any other one."""
        count = len(self.upstreams)
        for offset in range(count):
            index = (slot + offset) % count
            host, port = self.upstreams[index]
            try:
                pair = await asyncio.wait_for(
                    asyncio.open_connection(host, port, limit=_MAX_HEAD), _CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError):
                continue
            return index, pair
        return None

    # --- for reports -------------------------------------------------------------------------
    def dump(self, path: Any) -> None:
        """Write every exchange as one JSON line (for reading a failed run afterwards)."""
        with open(path, "w", encoding="utf-8") as out:
            for ex in list(self.exchanges):
                out.write(json.dumps(ex.to_json()) + "\n")


def exchange_from_json(data: dict[str, Any]) -> Exchange:
    """The inverse of :meth:`Exchange.to_json` (for re-checking a dumped run)."""
    return Exchange(**{field: data[name] for field, name in _JSON_NAMES.items()})
