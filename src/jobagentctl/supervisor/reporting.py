"""The reporting phase: turn how the child ended into the job's terminal status, and report it with
the claim id, or release the job. A report is retried while the heartbeats keep the lease.
"""

from __future__ import annotations

import math
import random
import signal
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from functools import partial

from jobagentctl.durations import format_duration
from jobagentctl.errors import ClaimLost, ClaimMismatch, JobTerminal, NotFound
from jobagentctl.models import ClaimedJob, ClaimNext, JobStatus
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.lease.job_lease import Beat
from jobagentctl.supervisor.offthread import SignalPolicy, Waiter
from jobagentctl.supervisor.outcome import Outcome, StopReason, Verdict
from jobagentctl.supervisor.process.child import SpawnError
from jobagentctl.supervisor.protocol import SupervisorClient, describe_error, is_transient
from jobagentctl.supervisor.report_file import JobRecord
from jobagentctl.supervisor.retry import Retry
from jobagentctl.supervisor.watching import ChildEnd

__all__ = ["Reporter"]

# The API's limit on a status message (characters); the output tail is cut to fit.
MAX_MESSAGE_CHARS = 65536
# How long a release after an interrupt is retried: the user asked us to stop, so not long.
RELEASE_TIMEOUT_SECONDS = 10.0
# Backoff between report or release retries: starts here, doubles, capped, jittered.
RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 15.0


@dataclass
class Reporter:
    """Reports results and releases jobs through the main side's client."""

    client: SupervisorClient
    waiter: Waiter
    policy: SignalPolicy
    _: KW_ONLY
    report_timeout: float
    rng: random.Random
    log: Log
    # ``run --loop`` sets what the next report asks to claim along with it (see report).
    claim_next: ClaimNext | None = None
    next_claim: tuple[ClaimedJob, float, float] | None = field(default=None, init=False)

    def retry(self, budget: float) -> Retry:
        """The backoff of claims, reports and releases, within ``budget`` seconds."""
        return Retry(base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS, rng=self.rng, budget=budget)

    def settle(
        self,
        job: ClaimedJob,
        end: ChildEnd | SpawnError,
        record: JobRecord,
        *,
        timeout: float,
        lease_verdict: tuple[Beat, str] | None,
        no_output_timeout: float = math.inf,
        redact: Callable[[str], str] = str,
    ) -> Outcome:
        """Report (or release) according to how the child ended; fill ``record``.

        ``lease_verdict`` is what the lease learnt before the claim went (if it did);
        ``timeout`` and ``no_output_timeout`` are what the failure message names; ``redact``
        replaces the secrets in the message (the tail comes redacted already).
        """
        if isinstance(end, SpawnError):
            record.exit_code = end.exit_code
            return self._report_result(
                job, record, JobStatus.FAILURE, redact(end.message),
                Outcome(Verdict.NOT_STARTED, end.exit_code),
            )  # fmt: skip
        rc, reason = end.returncode, end.reason
        record.reason = reason
        if rc is not None and rc < 0:
            record.signal = -rc
        else:
            record.exit_code = rc
        if reason is StopReason.INTERRUPTED:
            sig = self.policy.interrupted or signal.SIGTERM
            if self.release(job, f"interrupted by {sig.name}"):
                record.status, record.reported = JobStatus.QUEUED.value, True
            return Outcome(reason, rc, sig)
        if reason is StopReason.CANCELLED:
            record.status = JobStatus.CANCELLED.value
            self.log.warn(f"job {job.id} was cancelled: stopped it")
            self.let_go(job)
            return Outcome(reason, rc)
        if reason is StopReason.LEASE_LOST:
            beat, why = lease_verdict or (Beat.LEASE_LOST, "the lease expired")
            if beat is Beat.JOB_GONE:
                self.log.warn(f"job {job.id} is gone ({why}): the result is not reported")
                return Outcome(Verdict.JOB_GONE, rc)
            self.log.warn(f"lease lost ({why}): the result is not reported")
            self.let_go(job)
            return Outcome(reason, rc)
        if reason is StopReason.REQUEUED:
            self.log.warn(f"job {job.id} was requeued by an operator: the result is not reported")
            self.let_go(job)
            return Outcome(reason, rc)
        assert rc is not None
        status, message = _result(rc, reason, timeout, no_output_timeout)
        message = None if message is None else redact(message)
        if message is not None and end.tail:
            room = MAX_MESSAGE_CHARS - len(message) - 1
            message = f"{message}\n{end.tail[-room:]}" if room > 0 else message
        return self._report_result(
            job, record, status, message, Outcome(reason or Verdict.COMPLETED, rc)
        )

    def _report_result(
        self,
        job: ClaimedJob,
        record: JobRecord,
        status: JobStatus,
        message: str | None,
        outcome: Outcome,
    ) -> Outcome:
        record.message = message
        failed = self.report(job, status, message)
        if failed is None:
            record.status, record.reported = status.value, True
            return outcome
        if failed.verdict is StopReason.CANCELLED:
            record.status = JobStatus.CANCELLED.value
        return Outcome(failed.verdict, outcome.returncode, failed.interrupted_by)

    def report(self, job: ClaimedJob, status: JobStatus, message: str | None) -> Outcome | None:
        """Report the terminal status, retrying while heartbeating. None when it was
        accepted, else how the run ends (lease lost, cancelled, failed, interrupted).

        With :attr:`claim_next` set (``run --loop``: a next job is wanted), the first try also
        claims the agent's next job in the same request. It is kept in :attr:`next_claim`. Retries
        do not ask again: a first try whose answer was lost may have claimed one already. Its lease
        then runs out, and the reaper puts it back.
        """
        retry = self.retry(self.report_timeout)
        # Stopping (a drain, an interrupt): no next job wanted.
        ask = None if self.policy.stopping or job.claim_id is None else self.claim_next
        while True:
            following, ask = ask, None
            sent_at = time.monotonic()
            call = self.waiter.call(
                partial(
                    self.client.update_status, job.id, status,
                    claim_id=job.claim_id, message=message, claim_next=following,
                ),
                "report",
                on_abandoned=self._give_back_claimed,
            )  # fmt: skip
            if not call.finished:
                self.log.warn(
                    f"interrupted by {self._interrupted().name}: {status.value} not reported "
                    "(the lease will expire)"
                )
                return Outcome(StopReason.INTERRUPTED, interrupted_by=self._interrupted())
            error = call.error
            if error is None:
                claimed = getattr(call.value, "claimed", None)
                if claimed:
                    self.next_claim = (claimed[0], sent_at, time.monotonic())
                return None
            refused = self._refused(job, status, error)
            if refused is not None:
                return refused
            delay = retry.failed()
            if delay is None or not is_transient(error):
                self.log.warn(f"cannot report {status.value}: {describe_error(error)}")
                return Outcome(Verdict.FAILED)
            self.log.warn(f"report failed, retrying in {delay:.1f}s: {describe_error(error)}")
            if self.waiter.pause(delay, "report"):
                return Outcome(StopReason.INTERRUPTED, interrupted_by=self._interrupted())

    def _refused(self, job: ClaimedJob, status: JobStatus, error: BaseException) -> Outcome | None:
        """How the run ends when the server refused the report because the claim is no longer
        ours (cancelled, deleted, lost); None for any other error."""
        not_reported = f"{status.value} not reported"
        if isinstance(error, ClaimLost) and error.job_status == JobStatus.CANCELLED:
            self.log.warn(f"job {job.id} was cancelled: {not_reported}")
            return Outcome(StopReason.CANCELLED)
        if isinstance(error, NotFound):
            # Deleted (our server), or a job ctrlplane no longer has: not a lease matter.
            self.log.warn(f"job {job.id} is gone ({describe_error(error)}): {not_reported}")
            return Outcome(Verdict.JOB_GONE)
        if isinstance(error, ClaimLost | ClaimMismatch | JobTerminal):
            self.log.warn(f"lease lost before the report ({describe_error(error)}): {not_reported}")
            return Outcome(StopReason.LEASE_LOST)
        return None

    def _interrupted(self) -> signal.Signals:
        """The signal that interrupted the run (a wait ended by a signal means there is one)."""
        sig = self.policy.interrupted
        assert sig is not None
        return sig

    def release(self, job: ClaimedJob, why: str) -> bool:
        """Put the job back in the queue (status ``queued`` with our claim id)."""
        client = self.client
        retry = self.retry(RELEASE_TIMEOUT_SECONDS)
        while True:
            call = self.waiter.call(lambda: client.release(job.id, claim_id=job.claim_id), "report")
            if not call.finished:
                return False
            if call.error is None:
                self.log.info(f"{why}: released job {job.id} back to the queue")
                return True
            delay = retry.failed()
            if delay is None or not is_transient(call.error):
                self.log.warn(
                    f"{why}: could not release job {job.id} "
                    f"({describe_error(call.error)}); its lease will expire instead"
                )
                return False
            if self.waiter.pause(delay, "report"):
                return False

    def let_go(self, job: ClaimedJob) -> None:
        """Say once, after the command of a claim we lost has ended, that it has. A job an operator
        requeued waits for this (or for the lease to run out) before another agent may claim it. The
        server refuses it (the claim is gone); no answer changes anything here."""
        if job.claim_id is None:
            return
        client = self.client
        call = self.waiter.call(lambda: client.release(job.id, claim_id=job.claim_id), "report")
        if call.finished and call.error is not None:
            self.log.debug(f"claim {job.claim_id} let go ({describe_error(call.error)})")

    def take_next_claim(self) -> tuple[ClaimedJob, float, float] | None:
        """The job claimed with the last report, with when that request was sent and
        answered (monotonic); None if none was. Taken once."""
        claim, self.next_claim = self.next_claim, None
        return claim

    def _give_back_claimed(self, accepted: object) -> None:
        for job in getattr(accepted, "claimed", None) or []:
            self.give_back(job)

    def give_back(self, job: ClaimedJob) -> None:
        """From an abandoned claim's thread: a job came after we stopped waiting."""
        try:
            self.client.release(job.id, claim_id=job.claim_id)
        except Exception as exc:
            self.log.warn(
                f"claimed job {job.id} while stopping and could not release it "
                f"({describe_error(exc)}): its lease will expire"
            )
        else:
            self.log.info(f"claimed job {job.id} while stopping: released it")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _result(
    rc: int, reason: StopReason | None, timeout: float, no_output_timeout: float
) -> tuple[JobStatus, str | None]:
    """The terminal status to report for a command that ended with ``rc``, and the message that says
    why it failed. ``reason`` is why it was stopped, if it was."""
    if reason is StopReason.TIMEOUT:
        return JobStatus.FAILURE, f"timed out after {format_duration(timeout)}"
    if reason is StopReason.NO_OUTPUT:
        return JobStatus.FAILURE, f"no output for {format_duration(no_output_timeout)}"
    if rc == 0:
        return JobStatus.SUCCESSFUL, None
    if rc < 0:
        return JobStatus.FAILURE, f"killed by signal {-rc} ({_signal_name(-rc)})"
    return JobStatus.FAILURE, f"exit code {rc}"
