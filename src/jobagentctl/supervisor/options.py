"""What `jobagentctl run` was asked to do. The CLI builds :class:`RunOptions` from flags and
settings; the supervisor only reads it. The exit codes it answers with are in outcome.py.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from uuid import UUID

from jobagentctl.supervisor.output.redact import DEFAULT_PATTERNS

__all__ = ["REPORT_TIMEOUT_SECONDS", "RunOptions"]

# How long the final report is retried (heartbeating meanwhile) before giving up with 125.
REPORT_TIMEOUT_SECONDS = 300.0


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
    # Stop the command after this long without output on either stream (needs capture).
    no_output_timeout: float = math.inf
    grace: float = 10.0
    stop_signal: signal.Signals = signal.SIGTERM
    loop: bool = False
    max_jobs: int | None = None
    idle_timeout: float = math.inf
    report_path: Path | None = None
    output_tail_bytes: int = 8192
    capture: bool = True
    # Ship the command's output to the server's log as it runs (with capture, on a server
    # that has the log endpoint); off keeps the local tail only.
    ship_output: bool = True
    on_lease_lost: Literal["stop", "continue"] = "stop"
    pass_api_key: bool = False
    report_timeout: float = REPORT_TIMEOUT_SECONDS
    # Names of variables whose values are redacted from what leaves the machine.
    redact_patterns: tuple[str, ...] = DEFAULT_PATTERNS
