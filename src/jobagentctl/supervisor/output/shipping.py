"""Shipping the command's output to the server's job log while it runs, never in its way.

A :class:`Shipper` is an output sink (relay.py): the main loop hands it each chunk and returns at
once. Its own thread, on a client of its own (never the heartbeat's connection), sends what waits as
appends fenced by the claim id. An append starts when 64 KiB wait or when the oldest has waited a
second, whichever comes first. It takes everything that waits, up to :data:`APPEND_BYTES`. A command
printing faster than one append at a time gets bigger appends, not paced ones. So output up to the
server's log cap reaches it whole when the server keeps up. What waits is bounded
(:data:`BUFFER_BYTES`). Past it the oldest output goes, never silently: a ``marker`` chunk in the
log says how many bytes and why. The command printed faster than shipping could send, the server was
unreachable, or the server's cap cuts that part anyway. At the end of the job :meth:`Shipper.close`
flushes for at most :data:`FLUSH_SECONDS` before the result is reported.

The shipper ships until it is closed, whatever happens to the claim meanwhile. The output of a
command being stopped (a cancel, a requeue) is what an operator needs most. The holder of a revoked
claim may still append to its own attempt until it lets go. If the server refuses an append anyway
(the claim is no longer the job's, the job is gone), nothing more is sent for the job. What was not
shipped is counted, and :meth:`close` says it once on stderr. A server without the log endpoint
(ctrlplane, an older jobagentctl) is reported through ``on_unsupported``; the next job asks again
(see runner.py).
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
    Conflict,
    LeaseUnsupported,
    LogsUnsupported,
    NotFound,
    PayloadTooLarge,
)
from jobagentctl.models import LOG_CHUNK_MAX_BYTES, LogChunkIn, LogStream
from jobagentctl.supervisor import retry
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.protocol import describe_error, is_transient

__all__ = [
    "APPEND_BYTES",
    "BATCH_BYTES",
    "BATCH_SECONDS",
    "BUFFER_BYTES",
    "FLUSH_SECONDS",
    "ShipLimits",
    "Shipper",
]

# An append starts once this much output waits (the server's limit per chunk, too) ...
BATCH_BYTES = LOG_CHUNK_MAX_BYTES
# ... or once the oldest has waited this long.
BATCH_SECONDS = 1.0
# One append carries at most this much: eight chunks, well within the server's default 1 MiB
# body once in base64. A server with a smaller body limit answers 413: then half as much, down
# to MIN_APPEND_BYTES.
APPEND_BYTES = 8 * LOG_CHUNK_MAX_BYTES
MIN_APPEND_BYTES = 1024
# What may wait for the server; past it the oldest output is dropped (counted and marked).
# Above the server's default log cap (10 MiB): a command that prints its whole log in a burst
# faster than it can be shipped still has it stored whole by the end. 1 MiB kept 1.1 MB of a
# 31 MB burst (issue 35). Once the server says its cap cuts the log, only what the cap keeps
# of the newest output waits (see _learn_cap).
BUFFER_BYTES = 16 * 1024 * 1024
# At the end of a job, how long the last output may take to reach the server before the
# result is reported (what is still unsent then is dropped, and said so on stderr).
FLUSH_SECONDS = 5.0
# Backoff between failed appends: from here, doubling, capped.
RETRY_BASE_SECONDS = 0.25
RETRY_CAP_SECONDS = 5.0

# Why output was dropped, as markers and stderr say it.
FASTER = "the command printed faster than shipping could send"
UNREACHABLE = "server unreachable"
PAST_CAP = "past the server's log cap, which keeps the head and the newest"


class LogClient(Protocol):
    """The one client method shipping uses (``client.Client.append_logs``)."""

    def append_logs(self, job_id: UUID, claim_id: UUID, chunks: list[LogChunkIn]) -> object:
        """Append ``chunks`` to the attempt's log; ``ClaimLost``/``ClaimMismatch`` when the
        claim is not the job's current one, ``LogsUnsupported`` without a log endpoint."""
        ...

    def recheck_logs(self) -> None:
        """Forget that the server was found without logs: the next append asks it again."""
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


@dataclass(frozen=True)
class ShipLimits:
    """How much output a :class:`Shipper` keeps and sends at once (tests make them small).

    - ``buffer_bytes``: what may wait for the server before the oldest is dropped;
    - ``batch_bytes`` and ``batch_seconds``: an append goes when this much waits, or this long;
    - ``append_bytes``: the most one append carries (halved on a 413).
    """

    buffer_bytes: int = BUFFER_BYTES
    batch_bytes: int = BATCH_BYTES
    batch_seconds: float = BATCH_SECONDS
    append_bytes: int = APPEND_BYTES


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
        limits: ShipLimits = ShipLimits(),
    ) -> None:
        self.client, self.job_id, self.claim_id = client, job_id, claim_id
        self.log = log
        self.on_unsupported = on_unsupported
        self.rng = rng or random.Random()
        self.buffer_bytes, self.batch_bytes = limits.buffer_bytes, limits.batch_bytes
        self.batch_seconds = limits.batch_seconds
        self.append_bytes = limits.append_bytes  # halved when the server answers 413
        self.shipped = 0  # bytes of output the server took
        self.dropped = 0  # bytes of output dropped (marked in the log when it could be)
        self.appends = 0
        # Set when the server refused appends for this job (the claim no longer its, the job
        # gone): what it said. Output from then on is counted in ``refused_bytes``, not sent.
        self.refused: str | None = None
        self.refused_bytes = 0
        self.unsupported = False  # the server has no log endpoint
        self._pieces: deque[_Piece] = deque()
        self._pending = 0
        self._bound = limits.buffer_bytes  # what may wait now (lower once the server's cap cuts)
        self._inflight = 0  # bytes of the append being sent
        self._unmarked = 0  # dropped bytes no marker has told the log of yet
        self._why = FASTER  # why the unmarked bytes were dropped
        self._failing = False  # the last append failed (the server unreachable)
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
                if self.refused is not None:
                    self.refused_bytes += len(data)
                    self.dropped += len(data)
                return
            self._pieces.append(_Piece(stream, time.time(), bytes(data)))
            self._pending += len(data)
            if self._pending > self._bound:
                why = PAST_CAP if self._bound < self.buffer_bytes else None
                self._drop_oldest(self._pending - self._bound, why)
            if self._pending >= self.batch_bytes or len(self._pieces) == 1:
                self._cond.notify()

    def close(self, timeout: float = FLUSH_SECONDS) -> None:
        """Send what waits, for at most ``timeout`` seconds; then stop. What could not be
        sent is dropped and said so on stderr, once."""
        with self._cond:
            self._closing = True
            self._flush_by = time.monotonic() + timeout
            self._cond.notify_all()
        self._thread.join(timeout + 0.5)
        with self._cond:
            self._off = True
            # An append still in flight may yet arrive; it is not known to have. Bytes dropped
            # earlier whose marker never went out are not in the log either.
            left = self._pending + self._unmarked
            left += self._inflight if self._thread.is_alive() else 0
            self._drop_oldest(self._pending, None)
            self._cond.notify_all()
            refused, refused_bytes = self.refused, self.refused_bytes
        if refused is not None:
            self.log.warn(
                f"{refused_bytes} bytes of output not shipped to the job's log: the server "
                f"refused them ({refused})"
            )
        elif left:
            why = UNREACHABLE if self._failing else "the server had not taken it all by then"
            self.log.warn(
                f"{left} bytes of output not shipped to the job's log within "
                f"{timeout:g}s of the command's end ({why})"
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
            if outcome == "stop":
                return
            if outcome == "ok":
                failures = 0
                continue
            if outcome == "smaller":
                with self._cond:
                    self._requeue(pieces, marker)
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
        """Wait for a batch (64 KiB, a second since the oldest piece, or closing). Take it, up to
        ``append_bytes``, with the dropped bytes it must mark first; None when done."""
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
            limit = self.append_bytes
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
            marker, self._unmarked = self._unmarked, 0
            return taken, marker

    def _send(self, pieces: list[_Piece], marker: int) -> str:
        """One append: ``ok``, ``retry`` (the batch goes back, after a pause), ``smaller``
        (back at once, to go in smaller appends) or ``stop`` (shipping ends)."""
        size = sum(len(p.data) for p in pieces)
        chunks = self._chunks(pieces, marker)
        try:
            result = self.client.append_logs(self.job_id, self.claim_id, chunks)
        except (LeaseUnsupported, LogsUnsupported) as exc:
            self._stop(None)
            self.unsupported = True
            self.on_unsupported(describe_error(exc))
            return "stop"
        except (Conflict, NotFound) as exc:
            # Not ours to write any more (409: the claim let go, taken over, the job ended;
            # 404/410: the job deleted): the lease machinery acts on that; here, what is not
            # shipped is counted.
            self.log.debug(f"log append refused ({describe_error(exc)}): shipping stopped")
            self._stop(describe_error(exc), size, marker)
            return "stop"
        except PayloadTooLarge as exc:
            if self.append_bytes > MIN_APPEND_BYTES and size > MIN_APPEND_BYTES:
                # The server's body limit is below our appends: smaller ones, for good.
                self.append_bytes = max(MIN_APPEND_BYTES, min(self.append_bytes, size) // 2)
                self.log.debug(f"log append too large ({describe_error(exc)}): smaller ones")
                return "smaller"
            return self._lost(pieces, marker, exc)
        except Exception as exc:
            if is_transient(exc):
                self._failing = True
                self.log.debug(f"log append failed, will retry: {describe_error(exc)}")
                return "retry"
            return self._lost(pieces, marker, exc)
        self._failing = False
        self.appends += 1
        self.shipped += size
        self._learn_cap(result)
        return "ok"

    def _lost(self, pieces: list[_Piece], marker: int, exc: Exception) -> str:
        """Refused for good (a bug, a limit): this batch is lost, and marked as such."""
        self.log.warn(f"log append refused: {describe_error(exc)}; dropped that output")
        if pieces:  # (a marker alone refused is not tried again)
            with self._cond:
                lost = sum(len(p.data) for p in pieces)
                self.dropped += lost
                self._unmarked += lost + marker
                self._why = f"refused by the server: {describe_error(exc)}"
        return "ok"

    def _learn_cap(self, result: object) -> None:
        """Once the server's cap cuts the log, it keeps the head it has and, of the newest, about
        three sevenths of what it holds. More than that waiting here would be sent only to be cut. A
        quarter waits, so that the marker before it stays in the newest part."""
        if not getattr(result, "truncated", False):
            return
        stored = getattr(result, "stored_bytes", 0)
        if isinstance(stored, int) and stored > 0:
            with self._cond:
                self._bound = max(self.append_bytes, min(self.buffer_bytes, stored // 4))
                self._drop_oldest(self._pending - self._bound, PAST_CAP)

    def _chunks(self, pieces: list[_Piece], marker: int) -> list[LogChunkIn]:
        """The append's chunks: the marker first, then the pieces, neighbours of one stream
        merged (the time of the first)."""
        chunks: list[LogChunkIn] = []
        if marker:
            text = f"[jobagentctl: {marker} bytes dropped: {self._why}]\n"
            if self._why == PAST_CAP:
                # The cap cuts the middle, our earlier markers with it: this one counts every
                # byte dropped here so far, so the last one left tells the whole story.
                text = f"[jobagentctl: {self.dropped} bytes dropped in all: {self._why}]\n"
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
        if self._pending > self._bound:
            self._drop_oldest(self._pending - self._bound, None)

    def _drop_oldest(self, count: int, why: str | None) -> None:
        """Drop ``count`` bytes from the oldest end (under the lock), to be marked: ``why``,
        or by default what the state of shipping says (unreachable, or not keeping up)."""
        if count <= 0 or not self._pieces:
            return
        self._why = why or (UNREACHABLE if self._failing else FASTER)
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

    def _stop(self, refused: str | None, batch: int = 0, marked: int = 0) -> None:
        """Nothing more is sent for this job. ``refused``: what the server said when it refused an
        append of ``batch`` bytes (and a marker of ``marked`` dropped ones). That batch, the bytes
        dropped before, and everything waiting or still to come are counted as not shipped."""
        with self._cond:
            self._off = True
            if refused is not None:
                self.refused = refused
                self.refused_bytes += batch + marked + self._unmarked + self._pending
                self.dropped += batch + self._pending
                self._unmarked = 0
            self._pieces.clear()
            self._pending = 0
            self._cond.notify_all()


def _utc(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)
