"""The child process of `run`: its files, its environment, and its process group.

The child runs in its own session (so its own process group): signals reach the whole group,
and a terminal's Ctrl-C reaches only jobagentctl, which decides what the child gets.

By default the child is started by the watchdog (:mod:`.watchdog`), a small process of its own
that owns the child's tree and stops it when the lease runs out even if `run` is dead or frozen;
``JOBAGENTCTL_WATCHDOG=0`` starts it directly, as before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobagentctl.models import (
    AGENT_ENV,
    API_KEY_ENV,
    API_KEY_FILE_ENV,
    ATTEMPT_ENV,
    CLAIM_ID_ENV,
    CTRLPLANE_ENV,
    JOB_FILE_ENV,
    JOB_ID_ENV,
    LEASE_SECONDS_ENV,
    STOP_REASON_FILE_ENV,
    URL_ENV,
    WORKSPACE_ENV,
    ClaimedJob,
)
from jobagentctl.supervisor.options import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, RunOptions

__all__ = [
    "Child",
    "JobFiles",
    "SpawnError",
    "child_environment",
    "enforcement_window",
    "sweep_stale_job_files",
    "watchdog_enabled",
]

# Variables that carry the API key (or point at it); never inherited unless --pass-api-key.
_SECRET_VARIABLES = (API_KEY_ENV, API_KEY_FILE_ENV, CTRLPLANE_ENV["api_key"])
# Job directories are named so a later run can find the ones a killed run left behind.
_DIRECTORY_PREFIX = "jobagentctl-job-"
_LOCK_NAME = ".lock"
# A directory younger than this is never swept: its run may not have locked it yet.
_SWEEP_MIN_AGE_SECONDS = 60.0


class JobFiles:
    """A private directory (0700) with the claimed job as JSON (0600) and the stop-reason file.

    The stop-reason file does not exist until the run asks the child to stop. The run holds an
    exclusive lock on the directory's lock file while it lives (the kernel drops it even on
    SIGKILL), which is how :func:`sweep_stale_job_files` tells leftovers from live runs.
    """

    def __init__(self, job: ClaimedJob) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"{_DIRECTORY_PREFIX}{job.id}-"))
        self._lock_fd = os.open(
            self.directory / _LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.job_file = self.directory / "job.json"
        self.stop_reason_file = self.directory / "stop-reason"
        fd = os.open(self.job_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(job.model_dump_json(by_alias=True))
            handle.write("\n")

    def write_stop_reason(self, reason: str) -> None:
        # Write then rename, so a child polling for the file never reads it half-written.
        partial = self.stop_reason_file.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(reason + "\n")
        os.replace(partial, self.stop_reason_file)

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def sweep_stale_job_files(base: Path | None = None) -> int:
    """Remove job directories whose run is gone (killed before it could); how many.

    Only directories older than a minute whose lock nobody holds: a live run holds its lock,
    and a directory that young may belong to a run that has not taken it yet.
    """
    root = Path(base or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    cutoff = time.time() - _SWEEP_MIN_AGE_SECONDS
    for entry in entries:
        try:
            if not (
                entry.name.startswith(_DIRECTORY_PREFIX)
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < cutoff
            ):
                continue
            fd = os.open(
                os.path.join(entry.path, _LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
            )
        except OSError:
            continue  # not a job directory of ours (or not ours to open)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its run is alive
        finally:
            os.close(fd)
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def child_environment(
    base: Mapping[str, str], job: ClaimedJob, options: RunOptions, files: JobFiles
) -> dict[str, str]:
    """The child's environment: ours, minus the API key, plus the job context (SPEC §6.2)."""
    env = {key: value for key, value in base.items() if key not in _SECRET_VARIABLES}
    if options.pass_api_key and options.api_key:
        env[API_KEY_ENV] = options.api_key
    context = {
        JOB_ID_ENV: str(job.id),
        CLAIM_ID_ENV: str(job.claim_id) if job.claim_id else None,
        ATTEMPT_ENV: str(job.attempt) if job.attempt is not None else None,
        # 0 for an unleased claim: the same meaning as `--lease-seconds 0`.
        LEASE_SECONDS_ENV: str(job.lease_seconds or 0),
        WORKSPACE_ENV: str(options.workspace_id),
        AGENT_ENV: str(options.agent_id),
        URL_ENV: options.url,
        JOB_FILE_ENV: str(files.job_file),
        STOP_REASON_FILE_ENV: str(files.stop_reason_file),
    }
    for key, value in context.items():
        if value is None:
            # Absent rather than empty: an empty claim id would not parse as a UUID.
            env.pop(key, None)
        else:
            env[key] = value
    return env


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

    The tree must be gone *before* the deadline: the SIGKILL comes a margin before it (5 % of
    what is left of the lease, at most 1 s) and the stop signal a grace before that (``--grace``,
    but at most a quarter of what is left, so a short lease is not stopped at its first delay).
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
    #: Set when the watchdog stopped the command (``lease_lost``) before it exited.
    stopped_by_watchdog: str | None = None
    _returncode: int | None = None
    _status: bytes = b""

    @property
    def pid(self) -> int:
        return self.leader_pid or self.process.pid

    @property
    def pgid(self) -> int:
        # The command leads a new session, so a new group whose id is its pid.
        return self.pid

    @property
    def watched(self) -> bool:
        """Whether a watchdog owns the command's tree."""
        return self.status_fd is not None or self.leader_pid != 0

    @property
    def returncode(self) -> int | None:
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
                process = subprocess.Popen(
                    argv,
                    env=env,
                    stdout=pipes[0][1] if capture else None,
                    stderr=pipes[1][1] if capture else None,
                    start_new_session=True,
                )
                child = cls(process, None, None, grace=grace)
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
        control_r, control_w = os.pipe2(os.O_CLOEXEC)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        # The watchdog keeps copies of the output pipes' read ends, to drain them if we die.
        outputs = [read_fd for read_fd, _ in pipes]
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    _WATCHDOG_SCRIPT,
                    str(control_r),
                    str(status_w),
                    str(int(stop_signal)),
                    repr(float(grace)),
                    str(stop_reason_file or ""),
                    ",".join(map(str, outputs)) or "-",
                    "--",
                    *argv,
                ],
                env=env,
                stdout=pipes[0][1] if pipes else None,
                stderr=pipes[1][1] if pipes else None,
                pass_fds=(control_r, status_w, *outputs),
                start_new_session=True,
            )
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
        # The first word from the watchdog: the command runs, or why it could not start.
        give_up = time.monotonic() + _WATCHDOG_START_SECONDS
        while child.leader_pid == 0:
            left = give_up - time.monotonic()
            if left <= 0:
                line = None
            elif not select.select([status_r], [], [], min(left, 0.5))[0]:
                child._resume_watchdog()  # the command may have stopped it already
                continue
            else:
                line = child._read_line()
            if line is None:
                child._abort()
                raise OSError(errno.ENOEXEC, "the watchdog did not start the command")
            words = line.split()
            if words[:1] == ["started"]:
                child.leader_pid = int(words[1])
            elif words[:1] == ["spawn_error"]:
                child._abort()
                code = int(words[1])
                raise OSError(code, os.strerror(code))
            elif words[:1] == ["error"]:
                child._abort()
                raise OSError(errno.ENOEXEC, f"watchdog: {line[6:]}")
        os.set_blocking(status_r, False)
        os.set_blocking(control_w, False)
        return child

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
            words = raw.decode("ascii", "replace").split()
            if words[:1] == ["exit"] and self._returncode is None:
                self._returncode = os.waitstatus_to_exitcode(int(words[1]))
            elif words[:1] == ["stopping"] and self._returncode is None:
                self.stopped_by_watchdog = words[1] if len(words) > 1 else "lease_lost"

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
        """SIGKILL whatever is still in the group once the child itself is gone; with the
        watchdog, every process the command left anywhere (it is their subreaper), and wait
        for the watchdog to exit."""
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


def _spawn_error(program: str, exc: OSError) -> SpawnError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno == errno.ENOENT:
        return SpawnError(EXIT_NOT_FOUND, f"command not found: {program}")
    if isinstance(exc, PermissionError):
        return SpawnError(EXIT_NOT_EXECUTABLE, f"permission denied: {program} is not executable")
    return SpawnError(EXIT_NOT_EXECUTABLE, f"cannot execute {program}: {exc.strerror or exc}")
