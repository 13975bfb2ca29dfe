"""How a `run` ended, and the one function that turns that into its exit code.

Every phase (claiming, watching, reporting) ends in an :class:`Outcome`; only
:func:`exit_code` knows the numbers, so the table in docs/run.md is written once, below.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

__all__ = [
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "Outcome",
    "StopReason",
    "Verdict",
    "exit_code",
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


class StopReason(enum.StrEnum):
    """Why the run stopped the command (or, with none running, gave up on the job).

    A stop reason is also the run's verdict. The values are what crosses a process boundary:
    the file JOBAGENTCTL_STOP_REASON_FILE names, the watchdog's status pipe, and the ``reason``
    and ``verdict`` fields of ``--report`` (docs/run.md). A new reason is one line here plus
    its row in :func:`exit_code`.
    """

    LEASE_LOST = "lease_lost"  # the claim went away: nothing reported, the job runs elsewhere
    # An operator requeued the job while its lease held: nothing reported (a lease lost, as
    # scripts count it: exit 75), said as what it was.
    REQUEUED = "requeued"
    CANCELLED = "cancelled"  # an operator cancelled the job
    TIMEOUT = "timeout"  # --timeout stopped the command, failure reported
    NO_OUTPUT = "no_output"  # --no-output-timeout stopped a silent command, failure reported
    INTERRUPTED = "interrupted"  # a signal to run stopped it; the job was released


class Verdict(enum.StrEnum):
    """How a run ended when no :class:`StopReason` ended it, and who decided."""

    COMPLETED = "completed"  # the command ended on its own and its result was reported
    NOT_STARTED = "not_started"  # the command could not start (126/127), reported as failure
    JOB_GONE = "job_gone"  # the job was deleted (404 on a heartbeat or the report)
    NO_JOB = "no_job"  # nothing to claim
    FAILED = "failed"  # jobagentctl itself failed (claim, preparation, report)
    STOPPED = "stopped"  # --loop ended by itself: --max-jobs, idle limit, drained


@dataclass(frozen=True)
class Outcome:
    """The verdict (a :class:`Verdict`, or the :class:`StopReason` that ended the run), plus what
    the exit code needs. That is the command's return code and the signal that interrupted run. The
    return code is ``-N`` when signal N killed it, 126/127 when it could not start."""

    verdict: Verdict | StopReason
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
    | 75    | requeued      | an operator requeued the job: nothing reported, it runs again   |
    | 124   | timeout       | ``--timeout`` stopped the command, ``failure`` reported         |
    | 124   | no_output     | ``--no-output-timeout`` stopped a silent command, ``failure``   |
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
    if verdict is StopReason.INTERRUPTED:
        return 128 + (outcome.interrupted_by or signal.SIGTERM)
    codes: dict[Verdict | StopReason, int] = {
        Verdict.STOPPED: EXIT_OK,
        Verdict.NO_JOB: EXIT_NO_JOB,
        Verdict.JOB_GONE: EXIT_JOB_GONE,
        Verdict.FAILED: EXIT_FAILED,
        StopReason.LEASE_LOST: EXIT_LEASE_LOST,
        StopReason.REQUEUED: EXIT_LEASE_LOST,
        StopReason.TIMEOUT: EXIT_TIMEOUT,
        # A silent command is a timeout too (of its output): a script that knows 124 from
        # timeout(1) needs no new case; --report's reason tells the two apart.
        StopReason.NO_OUTPUT: EXIT_TIMEOUT,
        StopReason.CANCELLED: EXIT_CANCELLED,
    }
    return codes[verdict]
