"""The files and environment one job's command gets: the job as JSON (JOBAGENTCTL_JOB_FILE),
the stop-reason file (JOBAGENTCTL_STOP_REASON_FILE), and the variables that name them.

The files live in a private directory per job, and `redact add`'s socket in one of its own
(:func:`socket_directory`). Both are removed when the job ends. Those a killed run left behind are
swept by a later run (:func:`sweep_stale_job_files`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
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
    timestamps_as_sent,
)
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.outcome import StopReason

__all__ = ["JobFiles", "child_environment", "socket_directory", "sweep_stale_job_files"]

# Variables that carry the API key (or point at it); never inherited unless --pass-api-key.
_SECRET_VARIABLES = (API_KEY_ENV, API_KEY_FILE_ENV, CTRLPLANE_ENV["api_key"])
# Job directories are named so a later run can find the ones a killed run left behind.
_DIRECTORY_PREFIX = "jobagentctl-job-"
_SOCKET_DIRECTORY_PREFIX = "jobagentctl-redact-"
_LOCK_NAME = ".lock"
# The longest path a Unix socket address takes (108 bytes on Linux, with the final NUL).
_MAX_SOCKET_PATH = 100
# A directory younger than this is never swept: its run may not have locked it yet.
_SWEEP_MIN_AGE_SECONDS = 60.0


class JobFiles:
    """A private directory (0700) with the claimed job as JSON (0600) and the stop-reason file.

    The stop-reason file does not exist until the run asks the child to stop. The run holds an
    exclusive lock on the directory's lock file while it lives; the kernel drops it even on SIGKILL.
    That is how :func:`sweep_stale_job_files` tells leftovers from live runs.
    """

    def __init__(self, job: ClaimedJob) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"{_DIRECTORY_PREFIX}{job.id}-"))
        self._lock_fd = _lock(self.directory)
        self.job_file = self.directory / "job.json"
        self.stop_reason_file = self.directory / "stop-reason"
        fd = os.open(self.job_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(_job_json(job))
            handle.write("\n")

    def write_stop_reason(self, reason: StopReason) -> None:
        """Tell the command why it is being stopped: ``reason``'s value, one line."""
        # Write then rename, so a child polling for the file never reads it half-written.
        partial = self.stop_reason_file.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(reason.value + "\n")
        os.replace(partial, self.stop_reason_file)

    def remove(self) -> None:
        """Remove the directory and give up its lock (the job is over)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def socket_directory(socket_name: str) -> tuple[Path, int]:
    """A new private directory (0700) for a Unix socket named ``socket_name``, and the fd of its
    lock. The lock is held like a job directory's: close it once the directory is removed.

    It is made under the temporary directory if the socket's path fits there, else in /tmp
    (Unix socket paths are short).
    """
    directory = Path(tempfile.mkdtemp(prefix=_SOCKET_DIRECTORY_PREFIX, dir=_socket_base()))
    if len(str(directory / socket_name)) > _MAX_SOCKET_PATH:
        shutil.rmtree(directory, ignore_errors=True)
        raise OSError(f"the socket path {directory / socket_name} is too long")
    try:
        return directory, _lock(directory)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _socket_base() -> str:
    base = tempfile.gettempdir()
    if len(os.path.join(base, f"{_SOCKET_DIRECTORY_PREFIX}xxxxxxxx", "s")) > _MAX_SOCKET_PATH:
        return "/tmp"  # a deep $TMPDIR
    return base


def _lock(directory: Path) -> int:
    """Take the lock that tells a live run's directory from a leftover; its fd."""
    fd = os.open(directory / _LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def sweep_stale_job_files(base: Path | None = None) -> int:
    """Remove job and socket directories whose run is gone (killed before it could); how many.

    Only directories older than a minute whose lock nobody holds. A live run holds its lock, and a
    directory that young may belong to a run that has not taken it yet. Without ``base``: under the
    temporary directory, and where socket directories go if elsewhere.
    """
    roots = [str(base)] if base else list(dict.fromkeys([tempfile.gettempdir(), _socket_base()]))
    return sum(_sweep(Path(root)) for root in roots)


def _sweep(root: Path) -> int:
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    cutoff = time.time() - _SWEEP_MIN_AGE_SECONDS
    for entry in entries:
        try:
            if not (
                entry.name.startswith((_DIRECTORY_PREFIX, _SOCKET_DIRECTORY_PREFIX))
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < cutoff
            ):
                continue
            fd = os.open(
                os.path.join(entry.path, _LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
            )
        except OSError:
            continue  # not a directory of ours (or not ours to open)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its run is alive
        finally:
            os.close(fd)
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def _job_json(job: ClaimedJob) -> str:
    """The job as the command reads it: every field, timestamps as the server wrote them."""
    fields = {**job.model_dump(mode="json", by_alias=True), **timestamps_as_sent(job)}
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def child_environment(
    base: Mapping[str, str], job: ClaimedJob, options: RunOptions, files: JobFiles
) -> dict[str, str]:
    """The child's environment: ours, minus the API key (unless ``--pass-api-key``), plus the job's
    context. That context is its ids, the lease, where the server is, and the job's two files."""
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
