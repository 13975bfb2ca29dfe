"""The child process of `run`: its files, its environment, and its process group.

The child runs in its own session (so its own process group): signals reach the whole group,
and a terminal's Ctrl-C reaches only jobagentctl, which decides what the child gets.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobagentctl.models import ClaimedJob
from jobagentctl.supervisor.options import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, RunOptions

__all__ = ["Child", "JobFiles", "SpawnError", "child_environment", "sweep_stale_job_files"]

# Variables that carry the API key (or point at it); never inherited unless --pass-api-key.
_SECRET_VARIABLES = ("JOBAGENTCTL_API_KEY", "JOBAGENTCTL_API_KEY_FILE", "CTRLPLANE_API_KEY")
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
        env["JOBAGENTCTL_API_KEY"] = options.api_key
    context = {
        "JOBAGENTCTL_JOB_ID": str(job.id),
        "JOBAGENTCTL_CLAIM_ID": str(job.claim_id) if job.claim_id else None,
        "JOBAGENTCTL_ATTEMPT": str(job.attempt) if job.attempt is not None else None,
        # 0 for an unleased claim: the same meaning as `--lease-seconds 0`.
        "JOBAGENTCTL_LEASE_SECONDS": str(job.lease_seconds or 0),
        "JOBAGENTCTL_WORKSPACE": str(options.workspace_id),
        "JOBAGENTCTL_AGENT": str(options.agent_id),
        "JOBAGENTCTL_URL": options.url,
        "JOBAGENTCTL_JOB_FILE": str(files.job_file),
        "JOBAGENTCTL_STOP_REASON_FILE": str(files.stop_reason_file),
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


@dataclass
class Child:
    """A started child: its process, and the read ends of its output pipes (when captured)."""

    process: subprocess.Popen[bytes]
    stdout_fd: int | None
    stderr_fd: int | None

    @property
    def pgid(self) -> int:
        # start_new_session makes the child the leader of a new group with its pid as id.
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @classmethod
    def start(cls, argv: list[str], env: Mapping[str, str], *, capture: bool) -> Child:
        pipes = [os.pipe(), os.pipe()] if capture else []
        try:
            process = subprocess.Popen(
                argv,
                env=env,
                stdout=pipes[0][1] if capture else None,
                stderr=pipes[1][1] if capture else None,
                start_new_session=True,
            )
        except OSError as exc:
            for read_fd, write_fd in pipes:
                os.close(read_fd)
                os.close(write_fd)
            raise _spawn_error(argv[0], exc) from exc
        for _, write_fd in pipes:
            # Our copies of the write ends must go, or we would never see EOF.
            os.close(write_fd)
        if not capture:
            return cls(process, None, None)
        return cls(process, pipes[0][0], pipes[1][0])

    def poll(self) -> int | None:
        return self.process.poll()

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the child's whole process group; False if nothing is left."""
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:
            # A member changed credentials (setuid); signal the child itself at least.
            with contextlib.suppress(ProcessLookupError):
                if self.process.returncode is None:
                    os.kill(self.pgid, signum)
        return True

    def kill_leftovers(self) -> None:
        """SIGKILL whatever is still in the group once the child itself is gone."""
        self.signal_group(signal.SIGKILL)


def _spawn_error(program: str, exc: OSError) -> SpawnError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno == errno.ENOENT:
        return SpawnError(EXIT_NOT_FOUND, f"command not found: {program}")
    if isinstance(exc, PermissionError):
        return SpawnError(EXIT_NOT_EXECUTABLE, f"permission denied: {program} is not executable")
    return SpawnError(EXIT_NOT_EXECUTABLE, f"cannot execute {program}: {exc.strerror or exc}")
