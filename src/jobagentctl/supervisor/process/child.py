"""The child process of `run`: its process group, and the link to the watchdog that owns it.

The child runs in its own session (so its own process group), and signals reach the whole group. A
terminal's Ctrl-C reaches only jobagentctl, which decides what the child gets.

By default the child is started by the watchdog (:mod:`.watchdog`), a small process of its own. It
owns the child's tree, and stops it when the lease runs out even if `run` is dead or frozen;
``JOBAGENTCTL_WATCHDOG=0`` starts it directly. The two talk over two pipes in lines of ASCII words
(drawn in watchdog.py's docstring); the stop reason in them is a :class:`StopReason`'s value. The
files and environment the command gets are :mod:`.jobfiles`'.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobagentctl.supervisor.outcome import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, StopReason

__all__ = ["Child", "SpawnError", "enforcement_window", "watchdog_enabled"]


class SpawnError(Exception):
    """The command could not be started; ``exit_code`` is 126 or 127, as in the shells."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


# Set to 0 to run the command directly under `run`, without the watchdog (docs/run.md).
WATCHDOG_VARIABLE = "JOBAGENTCTL_WATCHDOG"
_WATCHDOG_SCRIPT = str(Path(__file__).with_name("watchdog.py"))
# How long `run` waits for the watchdog to report the command started (or could not).
_WATCHDOG_START_SECONDS = 60.0
# How long `run` waits for the watchdog to exit once told to kill what is left.
_WATCHDOG_EXIT_SECONDS = 15.0


def watchdog_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether jobs run under the watchdog: yes, unless ``JOBAGENTCTL_WATCHDOG=0``."""
    value = (os.environ if env is None else env).get(WATCHDOG_VARIABLE, "").strip().lower()
    return value not in ("0", "false", "no", "off")


def enforcement_window(deadline: float, now: float, grace: float) -> tuple[float, float]:
    """When the watchdog sends the stop signal and when it SIGKILLs, for a lease known to hold
    until ``deadline`` (monotonic), told at ``now``.

    The tree must be gone *before* the deadline. The SIGKILL comes a margin before it: 5 % of what
    is left of the lease, at most 1 s. The stop signal comes a grace before that: ``--grace``, but
    at most a quarter of what is left. So a short lease is not stopped at its first delay.
    """
    left = max(0.0, deadline - now)
    kill_at = deadline - min(1.0, 0.05 * left)
    return kill_at - min(grace, 0.25 * left), kill_at


@dataclass
class Child:
    """A started child: its process, and the read ends of its output pipes (when captured).

    With the watchdog (the default), ``process`` is the watchdog and the command is its child;
    :attr:`pid` is the command's. Without it, ``process`` is the command itself.
    """

    process: subprocess.Popen[bytes]
    stdout_fd: int | None
    stderr_fd: int | None
    leader_pid: int = 0
    grace: float = 10.0
    control_fd: int | None = None
    status_fd: int | None = None
    #: Why the watchdog stopped the command before it exited, if it did (the lease).
    stopped_by_watchdog: StopReason | None = None
    _returncode: int | None = None
    _status: bytes = b""

    @property
    def pid(self) -> int:
        """The command's pid (not the watchdog's)."""
        return self.leader_pid or self.process.pid

    @property
    def pgid(self) -> int:
        """The command's process group: it leads a new session, so a group whose id is its
        pid."""
        return self.pid

    @property
    def watched(self) -> bool:
        """Whether a watchdog owns the command's tree."""
        return self.status_fd is not None or self.leader_pid != 0

    @property
    def returncode(self) -> int | None:
        """The command's return code once it ended (``-N``: killed by signal N), else None."""
        if not self.watched:
            return self.process.returncode
        return self._returncode

    @classmethod
    def start(
        cls,
        argv: list[str],
        env: Mapping[str, str],
        *,
        capture: bool,
        lease_deadline: float | None = None,
        grace: float = 10.0,
        stop_signal: int = signal.SIGTERM,
        stop_reason_file: Path | None = None,
        watchdog: bool | None = None,
    ) -> Child:
        """Start ``argv``; under the watchdog unless ``watchdog`` is False (default: the
        ``JOBAGENTCTL_WATCHDOG`` variable). ``lease_deadline`` (monotonic; None: no lease)
        is when the lease is known to hold until: see :meth:`lease_holds_until`."""
        if watchdog is None:
            watchdog = watchdog_enabled()
        pipes = [os.pipe(), os.pipe()] if capture else []
        try:
            if watchdog:
                child = cls._start_watched(
                    argv, env, pipes, grace, stop_signal, stop_reason_file, lease_deadline
                )
            else:
                child = cls(_popen(argv, env, pipes), None, None, grace=grace)
        except OSError as exc:
            for read_fd, write_fd in pipes:
                os.close(read_fd)
                os.close(write_fd)
            raise _spawn_error(argv[0], exc) from exc
        for _, write_fd in pipes:
            # Our copies of the write ends must go, or we would never see EOF.
            os.close(write_fd)
        if capture:
            child.stdout_fd, child.stderr_fd = pipes[0][0], pipes[1][0]
        return child

    @classmethod
    def _start_watched(
        cls,
        argv: list[str],
        env: Mapping[str, str],
        pipes: list[tuple[int, int]],
        grace: float,
        stop_signal: int,
        stop_reason_file: Path | None,
        lease_deadline: float | None,
    ) -> Child:
        """Start the watchdog, which starts ``argv``; return once the command runs."""
        control_r, control_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        # The watchdog keeps copies of the output pipes' read ends, to drain them if we die.
        outputs = [read_fd for read_fd, _ in pipes]
        # watchdog.py CONTROL_FD STATUS_FD STOP_SIGNAL GRACE REASON_FILE OUTPUT_FDS -- CMD…
        command = [sys.executable, "-I", "-S", _WATCHDOG_SCRIPT, str(control_r), str(status_w)]
        command += [str(int(stop_signal)), repr(float(grace)), str(stop_reason_file or "")]
        command += [",".join(map(str, outputs)) or "-", "--", *argv]
        try:
            process = _popen(command, env, pipes, pass_fds=(control_r, status_w, *outputs))
        except BaseException:
            for fd in (control_r, control_w, status_r, status_w):
                os.close(fd)
            raise
        os.close(control_r)
        os.close(status_w)
        child = cls(process, None, None, grace=grace, control_fd=control_w, status_fd=status_r)
        if lease_deadline is not None:
            # Sent before the command starts: if we freeze while waiting for "started", the
            # watchdog must already have a deadline to enforce.
            child.lease_holds_until(lease_deadline)
        child._await_start()
        os.set_blocking(status_r, False)
        os.set_blocking(control_w, False)
        return child

    def _await_start(self) -> None:
        """Wait for the watchdog's first word: the command runs (its pid), or why it could
        not start (an OSError, as a direct start would raise)."""
        assert self.status_fd is not None
        give_up = time.monotonic() + _WATCHDOG_START_SECONDS
        while self.leader_pid == 0:
            left = give_up - time.monotonic()
            if left <= 0:
                line = None
            elif not select.select([self.status_fd], [], [], min(left, 0.5))[0]:
                self._resume_watchdog()  # the command may have stopped it already
                continue
            else:
                line = self._read_line()
            if line is None:
                self._abort()
                raise OSError(errno.ENOEXEC, "the watchdog did not start the command")
            word, _, rest = line.partition(" ")
            if word == "started":
                self.leader_pid = int(rest)
            elif word == "spawn_error":
                self._abort()
                raise OSError(int(rest), os.strerror(int(rest)))
            elif word == "error":
                self._abort()
                raise OSError(errno.ENOEXEC, f"watchdog: {rest}")

    def _read_line(self) -> str | None:
        """One status line, blocking (start-up only); None at EOF."""
        assert self.status_fd is not None
        while b"\n" not in self._status:
            data = os.read(self.status_fd, 4096)
            if not data:
                return None
            self._status += data
        line, self._status = self._status.split(b"\n", 1)
        return line.decode("ascii", "replace")

    def _abort(self) -> None:
        for fd in (self.control_fd, self.status_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.control_fd = self.status_fd = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(_WATCHDOG_EXIT_SECONDS)

    def lease_holds_until(self, deadline_monotonic: float) -> None:
        """The lease is known to hold until ``deadline_monotonic`` (time.monotonic()): the
        watchdog has the command's tree gone before then unless told a later deadline.

        Call after every successful heartbeat, from any thread; never blocks.
        """
        fd = self.control_fd
        if fd is None:
            return
        stop_at, kill_at = enforcement_window(deadline_monotonic, time.monotonic(), self.grace)
        with contextlib.suppress(OSError):
            os.write(fd, f"lease {stop_at!r} {kill_at!r}\n".encode())

    def poll(self) -> int | None:
        """Take in what the watchdog said; the command's return code if it has ended."""
        if not self.watched:
            return self.process.poll()
        self._read_status()
        self._resume_watchdog()
        if self._returncode is None and self.process.poll() is not None:
            self._read_status()  # what it said before it went
            if self._returncode is None:
                # The watchdog died (SIGKILLed) without a word: the command died with it
                # (PR_SET_PDEATHSIG) or is killed with its group now.
                self.signal_group(signal.SIGKILL)
                self._returncode = -signal.SIGKILL
        return self._returncode

    def _resume_watchdog(self) -> None:
        """The job may SIGSTOP its watchdog by pid (it cannot be refused): resume it at once."""
        if self.process.returncode is not None:
            return
        try:
            stopped = os.waitid(os.P_PID, self.process.pid, os.WSTOPPED | os.WNOHANG)
        except ChildProcessError:
            return
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)

    def _read_status(self) -> None:
        fd = self.status_fd
        if fd is None:
            return
        while True:
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    os.close(fd)
                self.status_fd = None
                break
            self._status += data
        while b"\n" in self._status:
            raw, self._status = self._status.split(b"\n", 1)
            word, _, rest = raw.decode("ascii", "replace").partition(" ")
            if word == "exit" and self._returncode is None:
                self._returncode = os.waitstatus_to_exitcode(int(rest))
            elif word == "stopping" and self._returncode is None:
                self.stopped_by_watchdog = _stop_reason(rest)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the command to end (not for what it left behind: see kill_leftovers)."""
        if not self.watched:
            return self.process.wait(timeout)
        give_up = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.5 if give_up is None else min(0.5, give_up - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(self.process.args, timeout or 0.0)
            # The status pipe wakes us; the short cap covers a watchdog that died silently.
            select.select([self.status_fd] if self.status_fd is not None else [], [], [], left)
        return self._returncode

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the child's whole process group; False if nothing is left."""
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:
            # A member changed credentials (setuid); signal the child itself at least.
            with contextlib.suppress(ProcessLookupError):
                if self.returncode is None:
                    os.kill(self.pgid, signum)
        return True

    def kill_leftovers(self) -> None:
        """SIGKILL whatever is still in the group once the child itself is gone, and wait for the
        watchdog to exit. With the watchdog, that is every process the command left anywhere (it is
        their subreaper)."""
        self.signal_group(signal.SIGKILL)
        fd = self.control_fd
        if fd is None:
            return
        self.control_fd = None
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)
            os.write(fd, b"kill\n")
        with contextlib.suppress(OSError):
            os.close(fd)
        try:
            self.process.wait(_WATCHDOG_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.poll()
        if self.status_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.status_fd)
            self.status_fd = None


def _popen(
    argv: list[str],
    env: Mapping[str, str],
    pipes: list[tuple[int, int]],
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, writing to the pipes' write ends (stdout, then
    stderr) when there are pipes, else to ours."""
    return subprocess.Popen(
        argv,
        env=env,
        stdout=pipes[0][1] if pipes else None,
        stderr=pipes[1][1] if pipes else None,
        pass_fds=pass_fds,
        start_new_session=True,
    )


def _spawn_error(program: str, exc: OSError) -> SpawnError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno == errno.ENOENT:
        return SpawnError(EXIT_NOT_FOUND, f"command not found: {program}")
    if isinstance(exc, PermissionError):
        return SpawnError(EXIT_NOT_EXECUTABLE, f"permission denied: {program} is not executable")
    return SpawnError(EXIT_NOT_EXECUTABLE, f"cannot execute {program}: {exc.strerror or exc}")


def _stop_reason(word: str) -> StopReason:
    """The reason a "stopping" line names; the lease (the one reason the watchdog stops a
    command for) when it names none we know."""
    try:
        return StopReason(word.strip())
    except ValueError:
        return StopReason.LEASE_LOST
