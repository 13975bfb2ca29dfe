"""What `jobagentctl run` was asked to do, and the exit codes it answers with (SPEC §6.9).

The CLI builds :class:`RunOptions` from flags and settings; the supervisor only reads it.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from uuid import UUID

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_JOB_GONE",
    "EXIT_LEASE_LOST",
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "EXIT_NO_JOB",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "MAX_POLL_SECONDS",
    "REPORT_TIMEOUT_SECONDS",
    "RunOptions",
]

EXIT_OK = 0
EXIT_JOB_GONE = 5  # the job was deleted (404): the CLI's code for "not found"
EXIT_NO_JOB = 7
EXIT_LEASE_LOST = 75  # EX_TEMPFAIL: the work may have happened; the server will re-run it
EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_FAILED = 125  # jobagentctl itself failed, as timeout(1)
EXIT_NOT_EXECUTABLE = 126  # as the shells
EXIT_NOT_FOUND = 127
EXIT_CANCELLED = 143  # 128 + SIGTERM: what a cancelled job looks like to a shell

# How long the final report is retried (heartbeating meanwhile) before giving up with 125.
REPORT_TIMEOUT_SECONDS = 300.0
# Longest single claim-next long-poll: between polls, signals and --idle-timeout are checked.
MAX_POLL_SECONDS = 30.0


@dataclass
class RunOptions:
    """Everything one `run` needs; durations in seconds, ``math.inf`` for "no limit"."""

    command: list[str]
    agent_id: UUID
    url: str
    workspace_id: UUID
    api_key: str | None = field(default=None, repr=False)
    job_id: UUID | None = None
    wait: float = 0.0
    lease_seconds: int = 60
    timeout: float = math.inf
    grace: float = 10.0
    stop_signal: signal.Signals = signal.SIGTERM
    loop: bool = False
    max_jobs: int | None = None
    idle_timeout: float = math.inf
    report_path: Path | None = None
    output_tail_bytes: int = 8192
    capture: bool = True
    on_lease_lost: Literal["stop", "continue"] = "stop"
    pass_api_key: bool = False
    report_timeout: float = REPORT_TIMEOUT_SECONDS
