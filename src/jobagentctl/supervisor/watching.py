"""The watching phase: the main loop while the child runs.

It:

- pumps the child's output to our relays, the tail and the run's sinks;
- acts on signals, heartbeat verdicts, the local lease deadline, ``--timeout`` and
  ``--no-output-timeout``;
- stops the child when asked to (reason file, stop signal, SIGKILL after ``--grace``);
- ends with a :class:`ChildEnd` once the child and its pipes are done.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass

from jobagentctl.durations import format_duration
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.events import Events, SignalReceived
from jobagentctl.supervisor.lease.job_lease import JobLease
from jobagentctl.supervisor.offthread import TICK_SECONDS, SignalPolicy
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.outcome import StopReason
from jobagentctl.supervisor.output.redact import Redactor
from jobagentctl.supervisor.output.relay import LastOutput, OutputSink, Relay
from jobagentctl.supervisor.output.tail import OutputTail
from jobagentctl.supervisor.process.child import Child
from jobagentctl.supervisor.process.jobfiles import JobFiles

__all__ = ["ChildEnd", "RelayRoom", "Watch"]

# While the command takes its time to stop, a reminder of what we wait for this often.
REMIND_SECONDS = 5.0


@dataclass(frozen=True)
class ChildEnd:
    """How the child's run ended: its return code (``-N``: killed by signal N; None: it never
    started), why run stopped it if it did, and the tail of its output."""

    returncode: int | None
    reason: StopReason | None
    tail: str


@dataclass(eq=False)
class Watch:
    """Runs the main loop for one started child. Use :meth:`run` once."""

    opts: RunOptions
    child: Child
    files: JobFiles
    lease: JobLease
    events: Events
    policy: SignalPolicy
    relays: Mapping[str, Relay]
    _: KW_ONLY
    suspend: Callable[[Child], None]
    log: Log
    # Secrets are replaced in what goes to the server (the tail, the sinks); our own copy
    # keeps them.
    redactor: Redactor | None = None
    # Each chunk of output goes to these too, redacted, as to the tail (relay.py).
    sinks: Sequence[OutputSink] = ()
    # When the command last printed, for the heartbeat (fed as read: only its time counts).
    clock: LastOutput | None = None

    def __post_init__(self) -> None:
        self.tail = OutputTail(self.opts.output_tail_bytes)
        self.reason: StopReason | None = None
        self.kill_at: float | None = None
        self.killed = False
        # While a stopped command takes its time, say now and then what we wait for.
        self.remind_at: float | None = None
        self.started = time.monotonic()
        self.timeout_at = self.started + self.opts.timeout
        # When the command last printed (monotonic), for --no-output-timeout.
        self.last_output = self.started
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.events.read_fd, selectors.EVENT_READ, None)
        # The child's open pipes; the paused ones are not read while their relay is full.
        self.pipes: dict[int, str] = {}
        self.paused: set[int] = set()
        for fd, stream in ((self.child.stdout_fd, "stdout"), (self.child.stderr_fd, "stderr")):
            if fd is not None:
                self.pipes[fd] = stream
                self.selector.register(fd, selectors.EVENT_READ, stream)

    def run(self) -> ChildEnd:
        """Watch the child to its end (and its pipes to EOF, or --grace after it)."""
        try:
            self._loop()
        finally:
            for fd, stream in list(self.pipes.items()):
                self._close_pipe(fd, stream)
            self.selector.close()
            self._close_tail()
            # Anything still in the group outlived the child: it is part of the job, and the
            # next job (or the shell) must not inherit it.
            self.child.kill_leftovers()
        return ChildEnd(returncode=self.child.returncode, reason=self.reason, tail=self.tail.text())

    def _pipes_open(self) -> bool:
        return bool(self.pipes)

    def _loop(self) -> None:
        while True:
            exited = self.child.poll() is not None
            if exited and self.reason is None and self.child.stopped_by_watchdog:
                # The watchdog stopped it at the local lease deadline (we were late or frozen).
                self.lease.expire()
                self.lease.lose()
                self.reason = self.child.stopped_by_watchdog
            if exited and not self._pipes_open():
                return
            self._resume_pipes(everything=exited)
            now = time.monotonic()
            if exited and self.kill_at is None:
                # A background process may hold the pipes: wait at most --grace for EOF.
                self.kill_at = now + self.opts.grace
            self._check_deadlines(now, exited)
            if exited and not self._pipes_open():
                return  # the pipes were just abandoned
            wake = now + TICK_SECONDS
            if not exited and self.kill_at is None:
                wake = min(wake, self.timeout_at, self._silent_at())
            if not exited and self.lease.watched:
                wake = min(wake, self.lease.deadline)
            if self.kill_at is not None and not self.killed:
                wake = min(wake, self.kill_at)
                if self.remind_at is not None:
                    wake = min(wake, self.remind_at)
            for key, _ in self.selector.select(max(0.0, wake - time.monotonic())):
                if key.data is None:
                    self._handle_events()
                else:
                    self._pump(key.fd, key.data)

    def _check_deadlines(self, now: float, exited: bool) -> None:
        if not exited and self.kill_at is None and now >= self.timeout_at:
            self.log.warn(f"timed out after {format_duration(self.opts.timeout)}: stopping")
            self._stop(StopReason.TIMEOUT, self.opts.stop_signal)
        if self.paused:
            # The command is blocked writing to a pipe we do not read (our reader is slow):
            # it is not silent.
            self.last_output = now
        if not exited and self.kill_at is None and now >= self._silent_at():
            silent = format_duration(self.opts.no_output_timeout)
            self.log.warn(f"no output for {silent} (--no-output-timeout): stopping")
            self._stop(StopReason.NO_OUTPUT, self.opts.stop_signal)
        # Once the child has exited its result is known: the report (fenced by the claim id)
        # decides whether the lease still holds, so the local deadline only matters before.
        if not exited and self.lease.watched and now >= self.lease.deadline:
            self.lease.expire()
            self._lease_lost()
        if (
            not exited
            and self.kill_at is not None
            and not self.killed
            and self.remind_at is not None
            and now >= self.remind_at
        ):
            self.remind_at = now + REMIND_SECONDS
            self.log.warn(
                f"still waiting for the command to exit ({self.reason}): SIGKILL in "
                f"{format_duration(max(0.0, round(self.kill_at - now)))}"
            )
        if self.kill_at is not None and now >= self.kill_at:
            if not self.killed:
                self.killed = True
                if not exited:
                    self.log.warn(
                        f"still running {format_duration(self.opts.grace)} after the stop "
                        "signal: SIGKILL"
                    )
                self.child.signal_group(signal.SIGKILL)
            if exited:
                self._abandon_pipes()

    def _silent_at(self) -> float:
        """When --no-output-timeout stops the command if it prints nothing more."""
        return self.last_output + self.opts.no_output_timeout

    def _handle_events(self) -> None:
        for event in self.events.drain():
            if isinstance(event, SignalReceived):
                self._on_signal(event.signum)
                continue
            verdict = self.lease.note(event)
            if verdict is None:
                continue
            self.log.debug(f"heartbeat verdict: {verdict} ({self.lease.why})")
            if verdict.stop_reason in (StopReason.LEASE_LOST, StopReason.REQUEUED):
                # The verdict (job_gone or not) tells the report more.
                self._lease_lost(verdict.stop_reason)
            else:
                self._stop(verdict.stop_reason, self.opts.stop_signal)

    def _lease_lost(self, reason: StopReason = StopReason.LEASE_LOST) -> None:
        self.lease.lose()
        if self.opts.on_lease_lost == "stop":
            self._stop(reason, self.opts.stop_signal)
        else:
            what = "requeued by an operator" if reason is StopReason.REQUEUED else "lease lost"
            self.log.warn(
                f"{what}: letting the child finish (--on-lease-lost "
                "continue); its result will not be reported"
            )
            if self.reason is None:
                self.reason = reason

    def _on_signal(self, signum: signal.Signals) -> None:
        if signum == signal.SIGTSTP:
            self.suspend(self.child)
            return
        if signum == signal.SIGCONT:
            # Resumed (by `fg`, or a SIGCONT after a SIGSTOP): the command too.
            self.child.signal_group(signal.SIGCONT)
            return
        action = self.policy.classify(signum)
        if action == "drain":
            self.log.info(f"{signum.name}: draining: the current job finishes, then exit")
        elif action == "interrupt":
            self._stop(StopReason.INTERRUPTED, signum)
            again = f"; {signum.name} again kills it now" if signum != signal.SIGHUP else ""
            self.log.warn(
                f"{signum.name}: stopping the job: sent {signum.name} to the command "
                f"(process group {self.child.pgid}); waiting up to "
                f"{format_duration(self.opts.grace)} for it to exit, then SIGKILL{again}"
            )
        elif action == "kill":
            self.log.warn(f"{signum.name} again: SIGKILL")
            self.killed = True
            self.child.signal_group(signal.SIGKILL)
        else:
            self.child.signal_group(signum)

    def _stop(self, reason: StopReason, signum: int) -> None:
        """Ask the child to stop: reason file, signal to the group, SIGKILL after --grace.

        The first reason stands, but any later one replaces a lost lease. With ``--on-lease-lost
        continue`` the command runs on. What then stops it (a timeout or an interrupt) is what the
        command and the report are told."""
        lease_lost = StopReason.LEASE_LOST
        if self.reason is None or (self.reason is lease_lost and reason is not lease_lost):
            self.reason = reason
            with contextlib.suppress(OSError):
                self.files.write_stop_reason(reason)
        self.child.signal_group(signum)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.opts.grace
            self.remind_at = time.monotonic() + REMIND_SECONDS

    def _pump(self, fd: int, stream: str) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._close_pipe(fd, stream)
            return
        self.last_output = time.monotonic()
        relay = self._hand_over(stream, data, over=self.child.returncode is not None)
        if relay is not None and relay.full:
            # Back-pressure: stop reading until the relay has room (the child then blocks
            # in its own write, as with a plain pipe); everything else goes on.
            self.log.debug(f"our {stream} is not being read: pausing the command's {stream}")
            self.selector.unregister(fd)
            self.paused.add(fd)
            relay.when_room(lambda: self.events.post(RelayRoom(stream)))

    def _hand_over(self, stream: str, data: bytes, *, over: bool) -> Relay | None:
        """One chunk to the tail and the sinks (redacted), and to our relay (as it is); the
        relay, if there is one. Once the job is ``over``, what our reader will not take now
        is dropped, not waited for."""
        if self.clock is not None:
            self.clock.feed(stream, data)
        self._to_server_side(stream, data)
        relay = self.relays.get(stream)
        if relay is not None:
            relay.write(data, drop_when_full=over)
        return None if over else relay

    def _to_server_side(self, stream: str, data: bytes) -> None:
        """What may leave the machine (the tail, the sinks) gets the redactor's segments."""
        if self.tail.limit == 0 and not self.sinks:
            return
        segments = [(stream, data)] if self.redactor is None else self.redactor.feed(stream, data)
        for segment_stream, segment in segments:
            self.tail.feed(segment_stream, segment)
            for sink in self.sinks:
                sink.feed(segment_stream, segment)

    def _close_tail(self) -> None:
        """The output is over: what the redactor held back (to the tail and the sinks), then
        each stream's last bytes."""
        if self.redactor is not None:
            for stream, segment in self.redactor.flush():
                self.tail.feed(stream, segment)
                for sink in self.sinks:
                    sink.feed(stream, segment)
        for stream in ("stdout", "stderr"):
            self.tail.close(stream)

    def _resume_pipes(self, *, everything: bool) -> None:
        for fd in list(self.paused):
            relay = self.relays.get(self.pipes[fd])
            if everything or relay is None or not relay.full:
                self.paused.discard(fd)
                self.selector.register(fd, selectors.EVENT_READ, self.pipes[fd])

    def _abandon_pipes(self) -> None:
        """Read what is already buffered, then stop reading: someone escaped the group."""
        for fd, stream in list(self.pipes.items()):
            while select.select([fd], [], [], 0)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self._hand_over(stream, data, over=True)
            self._close_pipe(fd, stream)

    def _close_pipe(self, fd: int, stream: str) -> None:
        if fd not in self.paused:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
        self.paused.discard(fd)
        self.pipes.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass(frozen=True)
class RelayRoom:
    """From a relay's writer thread: ``stream``'s relay has room again."""

    stream: str
