"""Shipping the command's output to the server's job log while it runs, never in its way.

A :class:`Shipper` is an output sink (relay.py): the main loop hands it each chunk and
returns at once. Its own thread, on a client of its own (never the heartbeat's connection),
sends what waits as appends fenced by the claim id: one when 64 KiB wait or when the oldest
has waited a second, whichever comes first. What waits is bounded (1 MiB): when the server is
slow or down the oldest output goes and a ``marker`` chunk in the log says how many bytes,
never silently (while it overflows, appends are paced: see OVERFLOW_PACE_SECONDS). At the end
of the job :meth:`Shipper.close` flushes for at most :data:`FLUSH_SECONDS` before the result
is reported. A server without the log endpoint (ctrlplane, an older jobagentctl) stops
shipping for the rest of the run, said once; a lost claim (409) or a deleted job (404) stops
it for this job.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol
from uuid import UUID

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    LeaseUnsupported,
    LogsUnsupported,
    NotFound,
)
from jobagentctl.models import LOG_CHUNK_MAX_BYTES, LogChunkIn, LogStream
from jobagentctl.supervisor import retry
from jobagentctl.supervisor.log import Log
from jobagentctl.supervisor.protocol import describe_error, is_transient

__all__ = ["BATCH_BYTES", "BATCH_SECONDS", "BUFFER_BYTES", "FLUSH_SECONDS", "Shipper"]

# One append carries at most this much output while the command runs (the server's limit per
# chunk, too) ...
BATCH_BYTES = LOG_CHUNK_MAX_BYTES
# ... and while flushing at the end, when only the total time counts, this many such chunks
# (well within the server's default 1 MiB body once in base64).
FLUSH_BATCH_CHUNKS = 8
# ... and output waits at most this long for an append to start.
BATCH_SECONDS = 1.0
# What may wait for a slow or absent server; past it the oldest output is dropped (counted).
# Also what the final flush may have to send: 4 MiB made a 50 MB firehose's run 1.27× slower
# than without shipping, 1 MiB 1.08–1.11× (docs/benchmarks.md).
BUFFER_BYTES = 1024 * 1024
# At the end of a job, how long the last output may take to reach the server before the
# result is reported (what is still unsent then is dropped, and said so on stderr).
FLUSH_SECONDS = 5.0
# While the buffer overflows (a command printing faster than its output can be shipped), at
# least this long between appends.
OVERFLOW_PACE_SECONDS = 0.25
# Backoff between failed appends: from here, doubling, capped.
RETRY_BASE_SECONDS = 0.25
RETRY_CAP_SECONDS = 5.0


class LogClient(Protocol):
    """The one client method shipping uses (``client.Client.append_logs``)."""

    def append_logs(self, job_id: UUID, claim_id: UUID, chunks: list[LogChunkIn]) -> object:
        """Append ``chunks`` to the attempt's log; ``ClaimLost``/``ClaimMismatch`` when the
        claim is not the job's current one, ``LogsUnsupported`` without a log endpoint."""
        ...

    def close(self) -> None:
        """Free the connections."""
        ...


@dataclass
class _Piece:
    """Output waiting to be sent: its stream, when it was read (wall clock), its bytes."""

    stream: str
    at: float
    data: bytes


class Shipper:
    """Ships one job attempt's output (see the module docstring). ``feed`` from the main
    loop; :meth:`start` once, :meth:`close` once at the end."""

    def __init__(
        self,
        client: LogClient,
        job_id: UUID,
        claim_id: UUID,
        *,
        log: Log,
        on_unsupported: Callable[[str], None],
        rng: random.Random | None = None,
        buffer_bytes: int = BUFFER_BYTES,
        batch_bytes: int = BATCH_BYTES,
        batch_seconds: float = BATCH_SECONDS,
    ) -> None:
        self.client, self.job_id, self.claim_id = client, job_id, claim_id
        self.log = log
        self.on_unsupported = on_unsupported
        self.rng = rng or random.Random()
        self.buffer_bytes, self.batch_bytes = buffer_bytes, batch_bytes
        self.batch_seconds = batch_seconds
        self.shipped = 0  # bytes of output the server took
        self.dropped = 0  # bytes of output dropped (marked in the log when it could be)
        self.appends = 0
        self._pieces: deque[_Piece] = deque()
        self._pending = 0
        self._inflight = 0  # bytes of the append being sent
        self._unmarked = 0  # dropped bytes no marker has told the log of yet
        self._overflowing = False  # the buffer overflowed and has not drained to half since
        self._why = "server too slow"
        self._cond = threading.Condition()
        self._closing = False
        self._off = False  # shipping stopped: nothing more is taken
        self._flush_by = 0.0
        self._thread = threading.Thread(target=self._main, name=f"ship-{job_id}", daemon=True)

    def start(self) -> None:
        """Start the sending thread."""
        self._thread.start()

    def feed(self, stream: str, data: bytes) -> None:
        """Queue a chunk of output; never blocks (the oldest output goes when full)."""
        if not data:
            return
        with self._cond:
            if self._off:
                return
            self._pieces.append(_Piece(stream, time.time(), bytes(data)))
            self._pending += len(data)
            if self._pending > self.buffer_bytes:
                self._overflowing = True
                self._drop_oldest(self._pending - self.buffer_bytes)
            if self._pending >= self.batch_bytes or len(self._pieces) == 1:
                self._cond.notify()

    def close(self, timeout: float = FLUSH_SECONDS) -> None:
        """Send what waits, for at most ``timeout`` seconds; then stop. What could not be
        sent is dropped and said so on stderr."""
        with self._cond:
            self._closing = True
            self._flush_by = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout + 0.5)
        with self._cond:
            self._off = True
            # An append still in flight may yet arrive; it is not known to have.
            left = self._pending + (self._inflight if self._thread.is_alive() else 0)
            self._drop_oldest(self._pending)
            self._cond.notify_all()
        if left:
            self.log.warn(
                f"{left} bytes of output not shipped to the job's log within "
                f"{timeout:g}s ({self._why})"
            )

    # --- the sending thread ------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._run()
        finally:
            try:
                self.client.close()
            except Exception as exc:  # closing must never take the run down
                self.log.debug(f"closing the log client: {describe_error(exc)}")

    def _run(self) -> None:
        failures = 0
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            pieces, marker = batch
            outcome = self._send(pieces, marker)
            with self._cond:
                self._inflight = 0
                if self._overflowing and not self._closing:
                    # Output comes faster than it can be shipped and most of it is dropped
                    # anyway: ship at a bounded pace (the newest output waits for the end)
                    # rather than spend the command's CPU on appends the cap would cut.
                    resume = time.monotonic() + OVERFLOW_PACE_SECONDS
                    while not (self._closing or self._off) and time.monotonic() < resume:
                        self._cond.wait(resume - time.monotonic())
            if outcome == "stop":
                return
            if outcome == "ok":
                failures = 0
                continue
            failures += 1
            delay = retry.backoff_delay(failures, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS, self.rng)
            with self._cond:
                self._requeue(pieces, marker)
                deadline = time.monotonic() + delay
                while not self._off and time.monotonic() < deadline:
                    if self._closing and time.monotonic() >= self._flush_by:
                        return
                    self._cond.wait(deadline - time.monotonic())

    def _next_batch(self) -> tuple[list[_Piece], int] | None:
        """Wait for a batch (64 KiB, or a second since the oldest piece, or closing) and take
        it with the dropped bytes it must mark first; None when done."""
        with self._cond:
            while True:
                if self._off or (self._closing and time.monotonic() >= self._flush_by):
                    return None
                if self._pieces or self._unmarked:
                    oldest = self._pieces[0].at if self._pieces else 0.0
                    waited = time.time() - oldest
                    if self._closing or self._pending >= self.batch_bytes:
                        break
                    if waited >= self.batch_seconds:
                        break
                    self._cond.wait(self.batch_seconds - waited)
                elif self._closing:
                    return None
                else:
                    self._cond.wait()
            taken: list[_Piece] = []
            size = 0
            limit = self.batch_bytes * (FLUSH_BATCH_CHUNKS if self._closing else 1)
            while self._pieces and size < limit:
                piece = self._pieces[0]
                room = limit - size
                if len(piece.data) > room:
                    taken.append(_Piece(piece.stream, piece.at, piece.data[:room]))
                    piece.data = piece.data[room:]
                    size += room
                    break
                taken.append(self._pieces.popleft())
                size += len(piece.data)
            self._pending -= size
            self._inflight = size
            if self._pending <= self.buffer_bytes // 2:
                self._overflowing = False
            marker, self._unmarked = self._unmarked, 0
            return taken, marker

    def _send(self, pieces: list[_Piece], marker: int) -> str:
        """One append: ``ok``, ``retry`` (the batch goes back), or ``stop`` (shipping ends)."""
        chunks = self._chunks(pieces, marker)
        try:
            self.client.append_logs(self.job_id, self.claim_id, chunks)
        except (LeaseUnsupported, LogsUnsupported) as exc:
            self._stop()
            self.on_unsupported(describe_error(exc))
            return "stop"
        except (ClaimLost, ClaimMismatch, NotFound) as exc:
            # The lease machinery acts on a lost claim; the log is simply not ours any more.
            self.log.debug(f"log append refused ({describe_error(exc)}): shipping stopped")
            self._stop()
            return "stop"
        except Exception as exc:
            if is_transient(exc):
                self._why = "server unreachable"
                self.log.debug(f"log append failed, will retry: {describe_error(exc)}")
                return "retry"
            # Refused for good (a bug, a limit): this batch is lost, and marked as such.
            self.log.warn(f"log append refused: {describe_error(exc)}; dropped that output")
            if pieces:  # (a marker alone refused is not tried again)
                with self._cond:
                    lost = sum(len(p.data) for p in pieces)
                    self.dropped += lost
                    self._unmarked += lost + marker
            return "ok"
        self.appends += 1
        self.shipped += sum(len(p.data) for p in pieces)
        self._why = "server too slow"
        return "ok"

    def _chunks(self, pieces: list[_Piece], marker: int) -> list[LogChunkIn]:
        """The append's chunks: the marker first, then the pieces, neighbours of one stream
        merged (the time of the first)."""
        chunks: list[LogChunkIn] = []
        if marker:
            text = f"[jobagentctl: {marker} bytes dropped: {self._why}]\n"
            chunks.append(LogChunkIn.of(LogStream.MARKER, _utc(time.time()), text.encode()))
        merged: list[_Piece] = []
        for piece in pieces:
            if merged and merged[-1].stream == piece.stream:
                merged[-1] = _Piece(piece.stream, merged[-1].at, merged[-1].data + piece.data)
            else:
                merged.append(piece)
        step = LOG_CHUNK_MAX_BYTES
        for piece in merged:
            for i in range(0, len(piece.data), step):
                data = piece.data[i : i + step]
                chunks.append(LogChunkIn.of(LogStream(piece.stream), _utc(piece.at), data))
        return chunks

    def _requeue(self, pieces: list[_Piece], marker: int) -> None:
        """A failed batch goes back in front (under the lock), still bounded."""
        for piece in reversed(pieces):
            self._pieces.appendleft(piece)
            self._pending += len(piece.data)
        self._unmarked += marker
        if self._pending > self.buffer_bytes:
            self._drop_oldest(self._pending - self.buffer_bytes)

    def _drop_oldest(self, count: int) -> None:
        """Drop ``count`` bytes from the oldest end (under the lock), to be marked."""
        while count > 0 and self._pieces:
            piece = self._pieces[0]
            cut = min(count, len(piece.data))
            if cut == len(piece.data):
                self._pieces.popleft()
            else:
                piece.data = piece.data[cut:]
            count -= cut
            self._pending -= cut
            self.dropped += cut
            self._unmarked += cut

    def _stop(self) -> None:
        with self._cond:
            self._off = True
            self._pieces.clear()
            self._pending = 0
            self._cond.notify_all()


def _utc(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)
