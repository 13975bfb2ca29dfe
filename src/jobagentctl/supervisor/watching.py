"""The watching phase: the main loop while the child runs.

It pumps the child's output, acts on signals, heartbeat verdicts, the local lease deadline and
``--timeout``, stops the child when asked to (reason file, stop signal, SIGKILL after
``--grace``), and ends with a :class:`ChildEnd` once the child and its pipes are done.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobagentctl.durations import format_duration
from jobagentctl.supervisor.child import Child, JobFiles
from jobagentctl.supervisor.events import Events, SignalReceived
from jobagentctl.supervisor.heartbeat import Beat
from jobagentctl.supervisor.lease import JobLease
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.tail import OutputTail
from jobagentctl.supervisor.waiting import TICK_SECONDS, SignalPolicy

__all__ = ["ChildEnd", "Watch"]


@dataclass(frozen=True)
class ChildEnd:
    """How the child's run ended: its return code (``-N``: killed by signal N), why run
    stopped it (``lease_lost``, ``cancelled``, ``timeout``, ``interrupted``) if it did, and
    the tail of its output."""

    returncode: int | None
    reason: str | None
    tail: str


class Watch:
    """Runs the main loop for one started child. Use :meth:`run` once."""

    def __init__(
        self,
        options: RunOptions,
        child: Child,
        files: JobFiles,
        lease: JobLease,
        events: Events,
        policy: SignalPolicy,
        *,
        info: Callable[[str], None],
        warn: Callable[[str], None],
        debug: Callable[[str], None],
    ) -> None:
        self.opts = options
        self.child = child
        self.files = files
        self.lease = lease
        self.events = events
        self.policy = policy
        self._info, self._warn, self._debug = info, warn, debug
        self.tail = OutputTail(options.output_tail_bytes)
        self.reason: str | None = None
        self.kill_at: float | None = None
        self.killed = False
        self.started = time.monotonic()
        self.timeout_at = self.started + options.timeout
        self.selector = selectors.DefaultSelector()
        self.passthrough = {"stdout": 1, "stderr": 2}
        self.selector.register(events.read_fd, selectors.EVENT_READ, None)
        for fd, stream in ((child.stdout_fd, "stdout"), (child.stderr_fd, "stderr")):
            if fd is not None:
                self.selector.register(fd, selectors.EVENT_READ, stream)

    def run(self) -> ChildEnd:
        try:
            self._loop()
        finally:
            for key in list(self.selector.get_map().values()):
                if key.data is not None:
                    self._close_pipe(key.fd, key.data)
            self.selector.close()
            # Anything still in the group outlived the child: it is part of the job, and the
            # next job (or the shell) must not inherit it.
            self.child.kill_leftovers()
        return ChildEnd(returncode=self.child.returncode, reason=self.reason, tail=self.tail.text())

    def _pipes_open(self) -> bool:
        return any(key.data is not None for key in self.selector.get_map().values())

    def _loop(self) -> None:
        while True:
            exited = self.child.poll() is not None
            if exited and not self._pipes_open():
                return
            now = time.monotonic()
            if exited and self.kill_at is None:
                # A background process may hold the pipes: wait at most --grace for EOF.
                self.kill_at = now + self.opts.grace
            self._check_deadlines(now, exited)
            if exited and not self._pipes_open():
                return  # the pipes were just abandoned
            wake = now + TICK_SECONDS
            if not exited and self.kill_at is None:
                wake = min(wake, self.timeout_at)
            if not exited and self.lease.watched:
                wake = min(wake, self.lease.deadline)
            if self.kill_at is not None and not self.killed:
                wake = min(wake, self.kill_at)
            for key, _ in self.selector.select(max(0.0, wake - time.monotonic())):
                if key.data is None:
                    self._handle_events()
                else:
                    self._pump(key.fd, key.data)

    def _check_deadlines(self, now: float, exited: bool) -> None:
        if not exited and self.kill_at is None and now >= self.timeout_at:
            self._warn(f"timed out after {format_duration(self.opts.timeout)}: stopping")
            self._stop("timeout", self.opts.stop_signal)
        # Once the child has exited its result is known: the report (fenced by the claim id)
        # decides whether the lease still holds, so the local deadline only matters before.
        if not exited and self.lease.watched and now >= self.lease.deadline:
            self.lease.expire()
            self._lease_lost()
        if self.kill_at is not None and now >= self.kill_at:
            if not self.killed:
                self.killed = True
                if not exited:
                    self._warn(
                        f"still running {format_duration(self.opts.grace)} after the stop "
                        "signal: SIGKILL"
                    )
                self.child.signal_group(signal.SIGKILL)
            if exited:
                self._abandon_pipes()

    def _handle_events(self) -> None:
        for event in self.events.drain():
            if isinstance(event, SignalReceived):
                self._on_signal(event.signum)
                continue
            verdict = self.lease.note(event)
            if verdict is not None:
                self._debug(f"heartbeat verdict: {verdict.value} ({self.lease.why})")
            if verdict is Beat.CANCELLED:
                self._stop("cancelled", self.opts.stop_signal)
            elif verdict is Beat.LEASE_LOST:
                self._lease_lost()

    def _lease_lost(self) -> None:
        self.lease.lose()
        if self.opts.on_lease_lost == "stop":
            self._stop("lease_lost", self.opts.stop_signal)
        else:
            self._warn(
                "lease lost: letting the child finish (--on-lease-lost "
                "continue); its result will not be reported"
            )
            if self.reason is None:
                self.reason = "lease_lost"

    def _on_signal(self, signum: signal.Signals) -> None:
        action = self.policy.classify(signum)
        if action == "drain":
            self._info(f"{signum.name}: draining: the current job finishes, then exit")
        elif action == "interrupt":
            self._warn(f"{signum.name}: stopping the job")
            self._stop("interrupted", signum)
        elif action == "kill":
            self._warn(f"{signum.name} again: SIGKILL")
            self.killed = True
            self.child.signal_group(signal.SIGKILL)
        else:
            self.child.signal_group(signum)

    def _stop(self, reason: str, signum: int) -> None:
        """Ask the child to stop: reason file, signal to the group, SIGKILL after --grace."""
        if self.reason is None or (self.reason == "lease_lost" and reason != "lease_lost"):
            self.reason = reason
            with contextlib.suppress(OSError):
                self.files.write_stop_reason(reason)
        self.child.signal_group(signum)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.opts.grace

    def _pump(self, fd: int, stream: str) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._close_pipe(fd, stream)
            return
        self.tail.feed(stream, data)
        self._write_through(stream, data)

    def _write_through(self, stream: str, data: bytes) -> None:
        target = self.passthrough.get(stream)
        if target is None:
            return
        view = memoryview(data)
        while view:
            try:
                written = os.write(target, view)
            except BlockingIOError:
                select.select([], [target], [], TICK_SECONDS)
                continue
            except OSError as exc:
                # Our own stdout/stderr went away (closed pipe): keep the tail, drop the copy.
                self._debug(f"cannot pass {stream} through: {exc}")
                del self.passthrough[stream]
                return
            view = view[written:]

    def _abandon_pipes(self) -> None:
        """Read what is already buffered, then stop reading: someone escaped the group."""
        for key in list(self.selector.get_map().values()):
            if key.data is None:
                continue
            while select.select([key.fd], [], [], 0)[0]:
                try:
                    data = os.read(key.fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.tail.feed(key.data, data)
                self._write_through(key.data, data)
            self._close_pipe(key.fd, key.data)

    def _close_pipe(self, fd: int, stream: str) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
        self.tail.close(stream)
