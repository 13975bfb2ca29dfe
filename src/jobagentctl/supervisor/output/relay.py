"""Relaying output to our own stdout/stderr without ever blocking the main loop.

A :class:`Relay` owns one of our descriptors (1 or 2). A daemon thread writes what it is given, in
order, with plain blocking writes, so a reader that never reads blocks only that thread. What waits
is bounded (:data:`RELAY_LIMIT_BYTES` per descriptor). While a relay is full the watching phase
stops reading the child's pipe, so the child feels the back-pressure a plain pipe would give it.
Timeouts, signals, cancellation and lease loss are still acted on meanwhile. Output that cannot be
handed over is dropped and counted. That is output with the relay full after the child exited, or
still waiting when the run ends and ``--grace`` has passed.

After a chunk is handed to our relay (and the tail), the watching phase gives it to the run's
:class:`OutputSink` s. They get it in arrival order across both streams: the last-output clock
(:class:`LastOutput`) and the log shipper. A sink must never block: it is called on the main loop.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Protocol

__all__ = [
    "RELAY_LIMIT_BYTES",
    "LastOutput",
    "OutputSink",
    "Relay",
    "RelayText",
    "relayed_stderr",
]

# What may wait for a slow reader, per descriptor.
RELAY_LIMIT_BYTES = 1 << 20


class Relay:
    """Writes bytes to ``fd`` from a thread of its own; at most ``limit`` bytes wait."""

    def __init__(self, fd: int, *, limit: int = RELAY_LIMIT_BYTES, name: str = "") -> None:
        self.fd = fd
        self.limit = limit
        self.name = name or f"fd {fd}"
        self.dropped = 0
        self.broken: OSError | None = None
        self._chunks: deque[bytes] = deque()
        self._pending = 0  # bytes queued or being written
        self._cond = threading.Condition()
        self._closed = False
        self._on_room: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name=f"relay-{fd}", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Bytes queued or being written."""
        with self._cond:
            return self._pending

    @property
    def full(self) -> bool:
        """Whether the limit is reached (the watching phase then stops reading the child)."""
        with self._cond:
            return self._pending >= self.limit and self.broken is None

    def when_room(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (from the writer thread) once the relay is below half full."""
        with self._cond:
            self._on_room = callback
        if callback is not None and not self.full:
            callback()

    def write(self, data: bytes, *, drop_when_full: bool = True) -> bool:
        """Queue ``data``; False (and counted as dropped) when full and ``drop_when_full``,
        or when our descriptor is gone."""
        if not data:
            return True
        with self._cond:
            if self.broken is not None or self._closed:
                self.dropped += len(data)
                return False
            if drop_when_full and self._pending >= self.limit:
                self.dropped += len(data)
                return False
            self._chunks.append(bytes(data))
            self._pending += len(data)
            self._cond.notify()
        return True

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for everything queued to be written; True when it was."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending and self.broken is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` for everything queued to be written; then stop taking
        more and count what is left as dropped. The bytes dropped overall."""
        self.drain(timeout)
        with self._cond:
            self._closed = True
            left = sum(len(chunk) for chunk in self._chunks)
            self._chunks.clear()
            self.dropped += left
            self._pending -= left
            self._cond.notify_all()
            # A write still in flight (a reader that never reads) is lost with the process.
            return self.dropped + self._pending

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._chunks and not self._closed:
                    self._cond.wait()
                if not self._chunks:
                    return
                chunk = self._chunks.popleft()
            error = self._write_all(chunk)
            with self._cond:
                self._pending -= len(chunk)
                if error is not None and self.broken is None:
                    # Our stdout/stderr went away (closed pipe): everything else is dropped.
                    self.broken = error
                    self.dropped += len(chunk) + sum(len(c) for c in self._chunks)
                    self._pending = 0
                    self._chunks.clear()
                callback = self._on_room if self._pending <= self.limit // 2 else None
                if callback is not None:
                    self._on_room = None
                self._cond.notify_all()
            if callback is not None:
                callback()

    def _write_all(self, chunk: bytes) -> OSError | None:
        view = memoryview(chunk)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                # Someone handed us a non-blocking descriptor: wait until it takes more.
                select.select([], [self.fd], [], 1.0)
                continue
            except OSError as exc:
                return exc
            view = view[written:]
        return None


class RelayText(io.TextIOBase):
    """A text stream over a :class:`Relay` (for ``sys.stderr``): never blocks."""

    def __init__(self, relay: Relay, encoding: str = "utf-8") -> None:
        self._relay = relay
        self._encoding = encoding

    def writable(self) -> bool:
        """Always: a stream to write to."""
        return True

    def write(self, text: str) -> int:
        """Queue ``text`` (encoded) on the relay; never blocks."""
        self._relay.write(text.encode(self._encoding, errors="backslashreplace"))
        return len(text)

    def flush(self) -> None:
        """Nothing to do: the relay's thread writes as soon as it can."""

    def fileno(self) -> int:
        """The descriptor the relay writes to."""
        return self._relay.fd


@contextlib.contextmanager
def relayed_stderr(relay: Relay) -> Iterator[None]:
    """Our own messages (``print(..., file=sys.stderr)``) go through ``relay`` meanwhile, so
    a stderr nobody reads never blocks the main loop either."""
    import sys

    saved = sys.stderr
    try:
        ours = saved.fileno() == relay.fd
    except (AttributeError, OSError, ValueError):
        ours = False  # not a descriptor (a test runner's capture): left alone
    if not ours:
        yield
        return
    with contextlib.suppress(Exception):
        saved.flush()
    sys.stderr = RelayText(relay, getattr(saved, "encoding", None) or "utf-8")
    try:
        yield
    finally:
        sys.stderr = saved


class OutputSink(Protocol):
    """Takes each chunk of the command's output, ``(stream, data)``, in arrival order across
    both streams, on the main loop: it must return at once."""

    def feed(self, stream: str, data: bytes) -> None:
        """One chunk read from ``stream`` (``"stdout"`` or ``"stderr"``)."""
        ...


class LastOutput:
    """When the command last printed (wall clock, for the heartbeat's ``lastOutputAt``),
    shipped or not. A sink: the main loop writes it, the heartbeat thread reads it."""

    def __init__(self) -> None:
        self._at: float | None = None

    def feed(self, stream: str, data: bytes) -> None:
        """Note the time of a chunk (a float store: atomic for the reading thread)."""
        if data:
            self._at = time.time()

    @property
    def at(self) -> datetime | None:
        """The time of the last chunk, None before the first."""
        at = self._at
        return None if at is None else datetime.fromtimestamp(at, UTC)
