"""The watchdog: a small process between `run` and the job that owns the job's process tree.

Started by :meth:`jobagentctl.supervisor.process.child.Child.start` as a fresh interpreter running
this file (``python -I -S watchdog.py …``). It uses the standard library only, nothing of
jobagentctl, so it starts in a few milliseconds and stays small. It forks the job, then watches::

    supervisor (run) ──control pipe──▶ watchdog ──fork/exec──▶ job leader (own session)
         ▲   "lease STOP KILL" / "kill"   │ subreaper        └─▶ its group, double-forked
         └──────status pipe───────────────┘ PDEATHSIG            daemons (reparented here)
             "started PID" / "exit STATUS" / "stopping REASON"

- The job leader runs in a session (so a process group) of its own, not the watchdog's. The job's
  group-wide signals, and a terminal's, never reach the watchdog. The watchdog ignores the catchable
  signals a job could send it by pid. On Linux the leader gets ``PR_SET_PDEATHSIG`` (SIGKILL), so
  killing the watchdog kills the job. The watchdog is the job's subreaper
  (``PR_SET_CHILD_SUBREAPER``): a daemon that double-forks out of the group is still its child. It
  is not dumpable (``PR_SET_DUMPABLE`` 0). A job running as the same non-root user cannot ptrace it,
  nor read or write its memory through /proc. The job itself is dumpable again after its exec.
- Lease: after every successful heartbeat, the supervisor sends when to send the stop signal and
  when to SIGKILL. These are monotonic times, converted here to the boot-time clock, which also
  counts a suspended machine. If no newer one comes first, the watchdog writes ``lease_lost`` to the
  stop-reason file and sends the stop signal (and SIGCONT) to the group. At the kill time it
  SIGKILLs the group and every descendant.
- Between events it sleeps on the control pipe (a new deadline; end-of-file the moment the
  supervisor dies) and on SIGCHLD. It also sleeps on a ``CLOCK_BOOTTIME`` timerfd armed for the next
  deadline, which fires on time even across a suspend. No deadline, no wake-up. Without a timerfd it
  sleeps until the deadline, in ticks of at most 0.5 s where a boot-time clock exists. A sleep's
  timeout runs on the monotonic clock, which stops while the machine is suspended.
- Supervisor gone (the control pipe reads EOF: killed, crashed): the job's result can never be
  reported. So it is stopped at once the same way, its SIGKILL no later than the lease's.
- ``kill`` from the supervisor (the job is over): SIGKILL whatever is left of the tree, exit.

Never writes to its stdout/stderr: they are the job's, and go to /dev/null once it has started.
Everything it has to say goes to the status pipe.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import sys
import time

# Only what the interpreter has loaded anyway, plus ctypes: no typing, no contextlib (they
# would double the start-up of this helper, which every job pays).

__all__ = ["STOP_REASON", "Watchdog", "descendants", "main"]

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
TFD_TIMER_ABSTIME = 1
# Without a boot-time timer, the longest the watchdog sleeps where deadlines are on the boot-time
# clock: a machine suspended mid-sleep is noticed this late at worst (a sleep's timeout runs on
# the monotonic clock, which stops during a suspend; deadlines do not).
TICK_SECONDS = 0.5
_CLOCK_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)
# Once the tree is being SIGKILLed, how long to wait for processes that do not die (a process
# in uninterruptible sleep, another user's setuid program) before giving up on them.
KILL_PATIENCE_SECONDS = 10.0
# The one reason the watchdog stops a job for, written to the stop-reason file and said on the
# status pipe: the lease ran out, or the supervisor (who alone could renew it) is gone. It is
# StopReason.LEASE_LOST's value (this file imports nothing of ours; a test holds the two equal).
STOP_REASON = "lease_lost"
# Signals a job might send its parent by pid; ignored here (the job gets them back at exec).
IGNORED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGPIPE,
    signal.SIGXFSZ,
)


class _suppress:
    """contextlib.suppress, without importing contextlib."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, value: object, tb: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _boottime() -> float:
    """Seconds on a clock that keeps counting while the machine is suspended (Linux)."""
    clock = _CLOCK_BOOTTIME
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


class _Prctl:
    """``prctl(2)`` through ctypes, or nothing off Linux."""

    def __init__(self) -> None:
        self._fn: ctypes._NamedFuncPointer | None = None
        if sys.platform.startswith("linux"):
            with _suppress(OSError, AttributeError):
                self._fn = ctypes.CDLL(None, use_errno=True).prctl

    @property
    def available(self) -> bool:
        return self._fn is not None

    def __call__(self, option: int, value: int) -> bool:
        return self._fn is not None and bool(self._fn(option, value, 0, 0, 0) == 0)


class _BootTimer:
    """A ``CLOCK_BOOTTIME`` timerfd (Linux, through ctypes): readable once the boot-time clock
    reaches the moment it was armed for, a suspended machine included. ``fd`` is None where
    there is none; :meth:`timeout` then says how long a sleep may last instead."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self._settime: ctypes._NamedFuncPointer | None = None
        # timerfd_settime's argument: the interval (seconds, nanoseconds), then the expiry.
        self._spec = (ctypes.c_long * 4)()
        self._armed: float | None = None
        if _CLOCK_BOOTTIME is None or not sys.platform.startswith("linux"):
            return
        with _suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            create, self._settime = libc.timerfd_create, libc.timerfd_settime
            fd = int(create(_CLOCK_BOOTTIME, os.O_CLOEXEC | os.O_NONBLOCK))
            if fd >= 0:
                self.fd = fd

    def timeout(self, moment: float | None, now: float) -> float | None:
        """How long to sleep (None: until an event) to wake at ``moment`` (boot-time clock;
        None: no deadline), arming the timerfd for it when there is one."""
        if moment is None:
            self._arm(0.0)  # disarmed: nothing to wake for
            return None
        if self.fd is not None and self._arm(moment):
            return None
        wait = max(0.0, moment - now)
        # Deadlines on a clock that counts a suspend, a sleep on one that does not: wake up
        # now and then to look. (Without a boot-time clock both are the same clock.)
        return min(wait, TICK_SECONDS) if _CLOCK_BOOTTIME is not None else wait

    def _arm(self, moment: float) -> bool:
        """Arm (``moment`` > 0) or disarm (0) the timerfd; False if it could not be."""
        if self.fd is None or self._settime is None:
            return False
        if moment == self._armed:
            return True
        seconds = int(moment)
        # Rounded up: it must not fire before ``moment`` (zero nanoseconds at zero seconds,
        # which would disarm it, cannot happen either).
        nanoseconds = int((moment - seconds) * 1e9) + 1 if moment > 0 else 0
        if nanoseconds >= 1_000_000_000:
            seconds, nanoseconds = seconds + 1, nanoseconds - 1_000_000_000
        self._spec[2], self._spec[3] = seconds, nanoseconds
        if self._settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            with _suppress(OSError):
                os.close(self.fd)
            self.fd = None  # from now on: sleep in ticks
            return False
        self._armed = moment
        return True

    def fired(self) -> None:
        """The timerfd was readable (and has been read): arm it afresh next time."""
        self._armed = None


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (Linux ``/proc``; empty where there is none)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != b"Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for pid in parents.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


class Watchdog:
    """The watchdog of one job: its pipes to the supervisor, the job's tree, the deadlines."""

    def __init__(
        self,
        control_fd: int,
        status_fd: int,
        stop_signal: int,
        reason_file: str,
        grace: float,
        output_fds: list[int],
    ) -> None:
        self.control_fd = control_fd
        # Copies of the read ends of the job's output pipes: read only once the supervisor is
        # gone, so that the job's writes (a shell's "Terminated") do not kill it with SIGPIPE
        # before its stop-signal handler runs.
        self.output_fds = output_fds
        self.draining: list[int] = []
        self.status_fd = status_fd
        self.stop_signal = stop_signal
        self.reason_file = reason_file
        self.grace = grace
        self.supervisor = os.getppid()
        self.supervisor_alive = True
        self.leader = 0
        self.leader_status: int | None = None
        self.stop_at: float | None = None  # boot-time clock
        self.kill_at: float | None = None
        self.stopping: str | None = None
        self._control = b""
        self.prctl = _Prctl()
        self.timer = _BootTimer()
        os.set_blocking(control_fd, False)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _noop)
        for signum in IGNORED:
            signal.signal(signum, signal.SIG_IGN)

    # --- talking to the supervisor -----------------------------------------------------------

    def say(self, line: str, *, wake: bool = False) -> None:
        """Write ``line`` to the status pipe; with ``wake``, SIGCHLD the supervisor too."""
        with _suppress(OSError):
            os.write(self.status_fd, line.encode() + b"\n")
        if wake and self.supervisor_alive:
            # The supervisor's main loop wakes on SIGCHLD: the job's status changed.
            with _suppress(OSError):
                os.kill(self.supervisor, signal.SIGCHLD)

    def read_control(self) -> None:
        """Act on every whole line the supervisor sent; its end-of-file means it is gone."""
        while True:
            try:
                data = os.read(self.control_fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.supervisor_gone()
                return
            self._control += data
            while b"\n" in self._control:
                line, self._control = self._control.split(b"\n", 1)
                self.command(line.decode("ascii", "replace").split())

    def command(self, words: list[str]) -> None:
        """One control line: ``lease STOP KILL`` (monotonic times) or ``kill``."""
        if words[:1] == ["lease"] and len(words) == 3 and self.stopping is None:
            offset = _boottime() - time.monotonic()
            stop_at, kill_at = float(words[1]) + offset, float(words[2]) + offset
            # Never move a deadline back (a late message about an older heartbeat).
            if self.kill_at is None or kill_at > self.kill_at:
                self.stop_at, self.kill_at = stop_at, kill_at
        elif words == ["kill"]:
            self.kill_tree()
            sys.exit(0)

    def supervisor_gone(self) -> None:
        """The control pipe is closed: nobody will report this job or renew its lease."""
        if not self.supervisor_alive:
            return
        self.supervisor_alive = False
        with _suppress(OSError):
            os.close(self.control_fd)
        if self.leader_status is not None:
            self.kill_tree()  # only leftovers remain
            sys.exit(0)
        for fd in self.output_fds:
            os.set_blocking(fd, False)
            self.draining.append(fd)
        now = _boottime()
        # The stop signal now; SIGKILL after the grace of the lease's window (or --grace when
        # there is no lease), and never later than the lease's own SIGKILL time.
        grace = self.grace
        if self.stop_at is not None and self.kill_at is not None:
            grace = self.kill_at - self.stop_at
        kill_at = now + grace
        if self.kill_at is not None:
            kill_at = min(kill_at, max(now, self.kill_at))
        self.begin_stop(kill_at)

    # --- stopping ----------------------------------------------------------------------------

    def begin_stop(self, kill_at: float) -> None:
        """Stop the job for its lease: the reason file, the stop signal and SIGCONT to its group
        now, SIGKILL at ``kill_at``. The supervisor is told (and woken)."""
        if self.stopping is not None:
            return
        reason = self.stopping = STOP_REASON
        self.stop_at, self.kill_at = None, kill_at
        self.write_reason(reason)
        self.say(f"stopping {reason}", wake=True)
        for signum in (self.stop_signal, signal.SIGCONT):
            with _suppress(OSError):
                os.killpg(self.leader, signum)

    def write_reason(self, reason: str) -> None:
        """As the supervisor would (write, then rename); never over a reason it wrote."""
        if not self.reason_file or os.path.exists(self.reason_file):
            return
        partial = self.reason_file + ".partial"
        with _suppress(OSError):
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, reason.encode() + b"\n")
            finally:
                os.close(fd)
            os.replace(partial, self.reason_file)

    def kill_tree(self) -> None:
        """SIGKILL the job's group and every descendant until none is left (or they resist)."""
        me = os.getpid()
        give_up = time.monotonic() + KILL_PATIENCE_SECONDS
        while True:
            with _suppress(OSError):
                os.killpg(self.leader, signal.SIGKILL)
            for pid in descendants(me):
                with _suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.reap()
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self.noted(pid, status)
                continue
            if time.monotonic() >= give_up:
                break
            select.select([self.wake_r], [], [], 0.05)
            _drain(self.wake_r)
        if self.leader_status is None:
            # Resisted SIGKILL past our patience: report it as killed all the same.
            self.leader_status = signal.SIGKILL
            self.say(f"exit {signal.SIGKILL}", wake=True)

    def reap(self) -> None:
        """Collect every child that has exited (the job's leader, or an orphan it left)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            self.noted(pid, status)

    def noted(self, pid: int, status: int) -> None:
        """A child exited: when it is the job's leader, tell the supervisor its status."""
        if pid == self.leader and self.leader_status is None:
            self.leader_status = status
            self.say(f"exit {status}", wake=True)

    # --- the job -----------------------------------------------------------------------------

    def spawn(self, argv: list[str]) -> bool:
        """Fork and exec the job; False (reported) if it could not be executed."""
        self.prctl(PR_SET_CHILD_SUBREAPER, 1)
        # Not ptraceable by the job (same user, no CAP_SYS_PTRACE): it could otherwise stop or
        # rewrite us at will. Inherited by the fork; the exec makes the job dumpable again.
        self.prctl(PR_SET_DUMPABLE, 0)
        me = os.getpid()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the job
            code = 127
            try:
                os.close(err_r)
                self.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != me:
                    os._exit(137)  # the watchdog died before we could ask to die with it
                os.setsid()
                signal.set_wakeup_fd(-1)
                for signum in (*IGNORED, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                os.close(self.control_fd)
                os.close(self.status_fd)
                for fd in self.output_fds:
                    os.close(fd)
                os.execvp(argv[0], argv)
            except OSError as exc:
                with _suppress(OSError):
                    os.write(err_w, str(exc.errno or errno.ENOEXEC).encode())
            except BaseException:
                code = 126
            os._exit(code)
        os.close(err_w)
        with os.fdopen(err_r, "rb") as handle:
            failure = handle.read()
        if failure:
            os.waitpid(pid, 0)
            self.say(f"spawn_error {int(failure)}")
            return False
        self.leader = pid
        self.say(f"started {pid}")
        # The job has its stdin/stdout/stderr; ours must not keep its pipes open.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        return True

    def next_deadline(self) -> float | None:
        """The next moment to act at (boot-time clock): the stop, then the SIGKILL."""
        if self.stopping is None and self.stop_at is not None:
            return self.stop_at
        return self.kill_at

    def run(self) -> None:
        """Watch until the tree is killed: deadlines, the control pipe, exits, the outputs."""
        while True:
            now = _boottime()
            if self.kill_at is not None and now >= self.kill_at:
                if self.stopping is None:
                    # Past the kill time already (a suspended machine resuming): no grace.
                    self.begin_stop(now)
                self.kill_tree()
                return
            if self.stopping is None and self.stop_at is not None and now >= self.stop_at:
                assert self.kill_at is not None
                self.begin_stop(self.kill_at)
            wait = self.timer.timeout(self.next_deadline(), now)
            watched = [self.wake_r, *self.draining]
            if self.supervisor_alive:
                watched.append(self.control_fd)
            if self.timer.fd is not None:
                watched.append(self.timer.fd)
            with _suppress(InterruptedError):
                ready, _, _ = select.select(watched, [], [], wait)
                if self.wake_r in ready:
                    _drain(self.wake_r)
                if self.timer.fd is not None and self.timer.fd in ready:
                    _drain(self.timer.fd)
                    self.timer.fired()
                for fd in ready:
                    if fd in self.draining and not _drain(fd):
                        self.draining.remove(fd)
                        os.close(fd)
            self.reap()
            if self.supervisor_alive:
                self.read_control()


def _noop(signum: int, frame: object) -> None:
    del signum, frame


def _drain(fd: int) -> bool:
    """Read what ``fd`` has (non-blocking); False at EOF."""
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def main(argv: list[str]) -> int:
    """``watchdog.py CONTROL_FD STATUS_FD STOP_SIGNAL GRACE REASON_FILE OUTPUT_FDS -- CMD…``

    OUTPUT_FDS: the read ends of the captured output pipes, comma-separated, or ``-``."""
    if len(argv) < 8 or argv[6] != "--":
        sys.stderr.write("usage: watchdog.py CONTROL STATUS SIGNAL GRACE REASON OUTPUT -- CMD…\n")
        return 2
    control_fd, status_fd, stop_signal = int(argv[0]), int(argv[1]), int(argv[2])
    outputs = [int(fd) for fd in argv[5].split(",") if fd.isdigit()]
    dog = Watchdog(control_fd, status_fd, stop_signal, argv[4], float(argv[3]), outputs)
    try:
        if not dog.spawn(argv[7:]):
            return 0
        dog.run()
    except SystemExit:
        raise
    except BaseException as exc:  # tell the supervisor, then take the job down with us
        dog.say(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        if dog.leader:
            dog.kill_tree()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
