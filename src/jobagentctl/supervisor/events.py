"""One wake-up channel for the supervisor's main loop: signals, child exits and thread news.

A self-pipe registered with ``signal.set_wakeup_fd`` wakes ``select`` on any signal; threads
write to the same pipe. Events themselves travel in a deque (appends are atomic).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["FORWARDED_SIGNALS", "JOB_CONTROL_SIGNALS", "Events", "SignalReceived"]

# Signals that are passed on to the child's process group: what a terminal, a service manager
# or a user sends to stop or poke a job is meant for the command, which runs in a session of its
# own where it would not reach it otherwise.
FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)

# Ctrl-Z and `fg`: the run suspends the command with itself, and resumes it (the command's own
# session never sees the terminal's SIGTSTP).
JOB_CONTROL_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTSTP, signal.SIGCONT)


@dataclass(frozen=True)
class SignalReceived:
    """A signal ``run`` caught, for the main loop to act on."""

    signum: signal.Signals


class Events:
    """The main loop's inbox. Use as a context manager in the main thread.

    While active, the forwarded signals and SIGCHLD are caught (recorded, never acted on in
    the handler) and the previous handlers are restored on exit.
    """

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # SignalReceived from the handler, or any object a thread posts.
        self._queue: deque[object] = deque()
        self._saved: dict[signal.Signals, Any] = {}
        self._saved_wakeup_fd: int | None = None
        # Guards the write end: a late thread must never write to a closed (reused) fd.
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Events:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the supervisor must run in the main thread (signals)")
        self._saved_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for signum in (*FORWARDED_SIGNALS, *JOB_CONTROL_SIGNALS, signal.SIGCHLD):
            self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()
        if self._saved_wakeup_fd is not None:
            signal.set_wakeup_fd(self._saved_wakeup_fd)
        with self._lock:
            self._closed = True
            for fd in (self.read_fd, self._write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only record it: the main loop acts. (set_wakeup_fd already woke select.)
        if signum != signal.SIGCHLD:
            self._queue.append(SignalReceived(signal.Signals(signum)))

    def post(self, news: object) -> None:
        """From any thread: queue ``news`` for the main loop and wake it."""
        with self._lock:
            if self._closed:
                return
            self._queue.append(news)
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._write_fd, b"\0")

    def drain(self) -> Iterator[object]:
        """Empty the pipe, then yield the queued events, oldest first."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.read_fd, 4096):
                pass
        while self._queue:
            yield self._queue.popleft()
