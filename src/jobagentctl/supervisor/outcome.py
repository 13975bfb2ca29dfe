"""How a `run` ended, and the one function that turns that into its exit code.

Every phase (claiming, watching, reporting) ends in an :class:`Outcome`; only
:func:`exit_code` knows the numbers, so the table in docs/run.md is written once, below.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from jobagentctl.supervisor.options import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_JOB_GONE,
    EXIT_LEASE_LOST,
    EXIT_NO_JOB,
    EXIT_OK,
    EXIT_TIMEOUT,
)

__all__ = ["Outcome", "Verdict", "exit_code"]


class Verdict(enum.StrEnum):
    """Who decided how the run ended, and what it was."""

    COMPLETED = "completed"  # the command ended on its own and its result was reported
    NOT_STARTED = "not_started"  # the command could not start (126/127), reported as failure
    TIMEOUT = "timeout"  # --timeout stopped the command, failure reported
    LEASE_LOST = "lease_lost"  # the claim went away: nothing reported
    CANCELLED = "cancelled"  # an operator cancelled the job
    JOB_GONE = "job_gone"  # the job was deleted (404 on a heartbeat or the report)
    INTERRUPTED = "interrupted"  # a signal to run stopped it; the job was released
    NO_JOB = "no_job"  # nothing to claim
    FAILED = "failed"  # jobagentctl itself failed (claim, preparation, report)
    STOPPED = "stopped"  # --loop ended by itself: --max-jobs, idle limit, drained


@dataclass(frozen=True)
class Outcome:
    """The verdict, plus what the exit code needs: the command's return code (``-N`` when
    signal N killed it; 126/127 when it could not start) and the signal that interrupted run."""

    verdict: Verdict
    returncode: int | None = None
    interrupted_by: signal.Signals | None = None


def exit_code(outcome: Outcome) -> int:
    """The exit code of `jobagentctl run` (docs/run.md, "Exit codes"):

    | Code  | Verdict       | Meaning                                                         |
    |-------|---------------|-----------------------------------------------------------------|
    | 0     | completed     | the command exited 0 and ``successful`` was reported            |
    | 0     | stopped       | ``--loop``: ``--max-jobs``, the idle limit reached, or drained  |
    | N     | completed     | the command's own exit code N (reported as ``failure``)         |
    | 128+N | completed     | the command was killed by signal N (reported as ``failure``)    |
    | 5     | job_gone      | the job was deleted (404): nothing reported                     |
    | 7     | no_job        | nothing to claim (``--wait`` ran out; ``--job`` not queued)     |
    | 75    | lease_lost    | the lease was lost: nothing reported, the job runs elsewhere    |
    | 124   | timeout       | ``--timeout`` stopped the command, ``failure`` reported         |
    | 125   | failed        | jobagentctl failed: config, server at claim, temp dir, report   |
    | 126   | not_started   | the command is not executable (``failure`` reported)            |
    | 127   | not_started   | the command was not found (``failure`` reported)                |
    | 128+N | interrupted   | run was interrupted by signal N: the job was released           |
    | 143   | cancelled     | the job was cancelled                                           |
    """
    verdict, rc = outcome.verdict, outcome.returncode
    if verdict in (Verdict.COMPLETED, Verdict.NOT_STARTED):
        assert rc is not None
        return 128 - rc if rc < 0 else rc
    if verdict is Verdict.INTERRUPTED:
        return 128 + (outcome.interrupted_by or signal.SIGTERM)
    codes = {
        Verdict.STOPPED: EXIT_OK,
        Verdict.NO_JOB: EXIT_NO_JOB,
        Verdict.JOB_GONE: EXIT_JOB_GONE,
        Verdict.LEASE_LOST: EXIT_LEASE_LOST,
        Verdict.TIMEOUT: EXIT_TIMEOUT,
        Verdict.FAILED: EXIT_FAILED,
        Verdict.CANCELLED: EXIT_CANCELLED,
    }
    return codes[verdict]
