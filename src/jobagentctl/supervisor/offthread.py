"""Waiting in the main thread outside the child: API calls in threads, pauses, signals.

The main thread must stay free for signals. So every API call of the claiming and reporting phases
runs in a short-lived daemon thread, while the main thread waits on :class:`Events`. What a signal
means is the :class:`SignalPolicy`'s decision; news from other threads (a heartbeat verdict) goes to
the ``on_news`` callback.
"""

from __future__ import annotations

import math
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, Literal, TypeVar

from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.events import Events, SignalReceived

__all__ = ["Action", "Call", "Phase", "SignalPolicy", "Waiter"]

T = TypeVar("T")

# Upper bound on any select() so a missed wake-up costs at most this much.
TICK_SECONDS = 1.0
# On exit, how long an abandoned call may still take to answer (and be given back).
ABANDONED_JOIN_SECONDS = 1.0

Phase = Literal["idle", "report"]
Action = Literal["drain", "interrupt", "kill", "forward"]


class SignalPolicy:
    """What a signal to `run` means (docs/run.md, "Signals"), and what was asked so far.

    ``draining``: the first SIGTERM with ``--loop`` (finish the job, claim no more).
    ``interrupted``: the signal that told the run to stop, if any.
    """

    def __init__(self, *, loop: bool) -> None:
        self.loop = loop
        self.draining = False
        self.interrupted: signal.Signals | None = None

    @property
    def stopping(self) -> bool:
        """Whether the run was asked to stop: drain or interrupt."""
        return self.draining or self.interrupted is not None

    def classify(self, signum: signal.Signals) -> Action:
        """What ``signum`` means now (and record it)."""
        if signum == signal.SIGTERM and self.loop and not self.draining:
            self.draining = True
            return "drain"
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if self.interrupted is None:
                self.interrupted = signum
                return "interrupt"
            if signum != signal.SIGHUP:
                return "kill"
        return "forward"


@dataclass
class Call(Generic[T]):
    """One API call running in its own thread.

    A call the main loop stops waiting for (a signal) is *abandoned*. If it still succeeds, its
    thread hands the value to ``on_abandoned`` (e.g. releases a job claimed too late).
    """

    value: T | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    @property
    def finished(self) -> bool:
        """Whether the call has answered (a value or an error)."""
        return self.done.is_set()

    def abandon(self) -> bool:
        """Stop waiting; False when it finished first (the caller then has the result)."""
        with self.lock:
            if not self.done.is_set():
                self.abandoned = True
        return self.abandoned


@dataclass
class Waiter:
    """Runs calls and pauses in the main thread, acting on signals meanwhile: news from other
    threads goes to ``on_news``, a Ctrl-Z to ``suspend``."""

    events: Events
    policy: SignalPolicy
    _: KW_ONLY
    on_news: Callable[[object], None]
    suspend: Callable[[], None]
    log: Log
    _abandoned: list[threading.Thread] = field(default_factory=list, init=False)

    def call(
        self,
        fn: Callable[[], T],
        phase: Phase,
        *,
        on_abandoned: Callable[[T], None] | None = None,
    ) -> Call[T]:
        """Run ``fn`` in a thread and wait for it, handling signals meanwhile.

        Returns the call unfinished when a signal asked us to stop waiting. The thread (a daemon) is
        then abandoned, and a late result goes to ``on_abandoned``.
        """
        call: Call[T] = Call()
        events = self.events

        def target() -> None:
            try:
                call.value = fn()
            except BaseException as exc:  # handed to the main thread, which decides
                call.error = exc
            with call.lock:
                call.done.set()
                late = call.abandoned
            if late and call.value is not None and on_abandoned is not None:
                on_abandoned(call.value)
            events.post(call)

        call.thread = threading.Thread(target=target, name="jobagentctl-call", daemon=True)
        call.thread.start()
        if self.wait_until(math.inf, call.done.is_set, phase) and call.abandon():
            self._abandoned.append(call.thread)
        return call

    def pause(self, seconds: float, phase: Phase) -> bool:
        """Sleep ``seconds`` unless a signal says stop (True)."""
        return self.wait_until(time.monotonic() + seconds, lambda: False, phase)

    def wait_until(self, deadline: float, done: Callable[[], bool], phase: Phase) -> bool:
        """Wait for ``done()`` or ``deadline``; True when a signal asked us to stop waiting."""
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([self.events.read_fd], [], [], min(remaining, TICK_SECONDS))
            for event in self.events.drain():
                if isinstance(event, SignalReceived):
                    if self._on_signal(event.signum, phase):
                        return True
                elif not isinstance(event, Call):
                    self.on_news(event)
        return False

    def join_abandoned(self) -> bool:
        """Give abandoned calls a moment to answer (a job claimed just as a signal came goes
        back to the queue now, not at lease expiry); True when none is left running."""
        deadline = time.monotonic() + ABANDONED_JOIN_SECONDS
        for thread in self._abandoned:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._abandoned)

    def _on_signal(self, signum: signal.Signals, phase: Phase) -> bool:
        """A signal while no child runs. True when the current wait must end."""
        if signum == signal.SIGTSTP:
            self.suspend()
            return False
        if signum == signal.SIGCONT:
            return False
        action = self.policy.classify(signum)
        if action == "drain":
            self.log.info(f"{signum.name}: draining (no new jobs)")
            # While claiming, stop now; while reporting, the current job is finished first.
            return phase == "idle"
        if action in ("interrupt", "kill"):
            if action == "kill":
                self.log.warn(f"{signum.name} again: giving up at once")
            return True
        self.log.debug(f"{signum.name}: no child to forward it to")
        return False
