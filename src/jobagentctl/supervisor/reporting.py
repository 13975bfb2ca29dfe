"""The reporting phase: turn how the child ended into the job's terminal status, report it
with the claim id (retrying while the heartbeats keep the lease), or release the job.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from functools import partial

from jobagentctl.durations import format_duration
from jobagentctl.errors import ClaimLost, ClaimMismatch, JobTerminal, NotFound
from jobagentctl.models import ClaimedJob, ClaimNext, JobStatus
from jobagentctl.supervisor.child import SpawnError
from jobagentctl.supervisor.heartbeat import Beat
from jobagentctl.supervisor.outcome import Outcome, Verdict
from jobagentctl.supervisor.protocol import SupervisorClient, describe_error, is_transient
from jobagentctl.supervisor.record import JobRecord
from jobagentctl.supervisor.retry import Retry
from jobagentctl.supervisor.waiting import SignalPolicy, Waiter
from jobagentctl.supervisor.watching import ChildEnd

__all__ = ["Reporter"]

# The API's limit on a status message (characters); the output tail is cut to fit.
MAX_MESSAGE_CHARS = 65536
# How long a release after an interrupt is retried: the user asked us to stop, so not long.
RELEASE_TIMEOUT_SECONDS = 10.0
# Backoff between report or release retries: starts here, doubles, capped, jittered.
RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 15.0


class Reporter:
    """Reports results and releases jobs through the main side's client."""

    def __init__(
        self,
        client: SupervisorClient,
        waiter: Waiter,
        policy: SignalPolicy,
        *,
        report_timeout: float,
        rng: random.Random,
        info: Callable[[str], None],
        warn: Callable[[str], None],
    ) -> None:
        self.client = client
        self.waiter = waiter
        self.policy = policy
        self.report_timeout = report_timeout
        self._rng = rng
        self._info, self._warn = info, warn
        # ``run --loop`` sets what the next report asks to claim along with it (see report).
        self.claim_next: ClaimNext | None = None
        self.next_claim: tuple[ClaimedJob, float, float] | None = None

    def retry(self, budget: float) -> Retry:
        return Retry(base=RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS, rng=self._rng, budget=budget)

    def settle(
        self,
        job: ClaimedJob,
        end: ChildEnd | SpawnError,
        record: JobRecord,
        *,
        timeout: float,
        lease_lost: tuple[Beat, str] | None,
    ) -> Outcome:
        """Report (or release) according to how the child ended; fill ``record``."""
        if isinstance(end, SpawnError):
            record.exit_code = end.exit_code
            return self._report_result(
                job, record, JobStatus.FAILURE, end.message,
                Outcome(Verdict.NOT_STARTED, end.exit_code),
            )  # fmt: skip
        rc = end.returncode
        record.reason = end.reason
        if rc is not None and rc < 0:
            record.signal = -rc
        else:
            record.exit_code = rc
        if end.reason == "interrupted":
            sig = self.policy.interrupted or signal.SIGTERM
            if self.release(job, f"interrupted by {sig.name}"):
                record.status, record.reported = JobStatus.QUEUED.value, True
            return Outcome(Verdict.INTERRUPTED, rc, sig)
        if end.reason == "cancelled":
            record.status = JobStatus.CANCELLED.value
            self._warn(f"job {job.id} was cancelled: stopped it")
            return Outcome(Verdict.CANCELLED, rc)
        if end.reason == "lease_lost":
            beat, why = lease_lost or (Beat.LEASE_LOST, "the lease expired")
            if beat is Beat.JOB_GONE:
                self._warn(f"job {job.id} is gone ({why}): the result is not reported")
                return Outcome(Verdict.JOB_GONE, rc)
            self._warn(f"lease lost ({why}): the result is not reported")
            return Outcome(Verdict.LEASE_LOST, rc)
        assert rc is not None
        if end.reason == "timeout":
            status, message = JobStatus.FAILURE, f"timed out after {format_duration(timeout)}"
            outcome = Outcome(Verdict.TIMEOUT, rc)
        elif rc == 0:
            status, message, outcome = JobStatus.SUCCESSFUL, None, Outcome(Verdict.COMPLETED, 0)
        elif rc < 0:
            status = JobStatus.FAILURE
            message = f"killed by signal {-rc} ({_signal_name(-rc)})"
            outcome = Outcome(Verdict.COMPLETED, rc)
        else:
            status, message, outcome = (
                JobStatus.FAILURE,
                f"exit code {rc}",
                Outcome(Verdict.COMPLETED, rc),
            )
        if message is not None and end.tail:
            room = MAX_MESSAGE_CHARS - len(message) - 1
            message = f"{message}\n{end.tail[-room:]}" if room > 0 else message
        return self._report_result(job, record, status, message, outcome)

    def _report_result(
        self,
        job: ClaimedJob,
        record: JobRecord,
        status: JobStatus,
        message: str | None,
        outcome: Outcome,
    ) -> Outcome:
        failed = self.report(job, status, message)
        if failed is None:
            record.status, record.reported = status.value, True
            return outcome
        if failed.verdict is Verdict.CANCELLED:
            record.status = JobStatus.CANCELLED.value
        return Outcome(failed.verdict, outcome.returncode, failed.interrupted_by)

    def report(self, job: ClaimedJob, status: JobStatus, message: str | None) -> Outcome | None:
        """Report the terminal status, retrying while heartbeating. None when it was
        accepted, else how the run ends (lease lost, cancelled, failed, interrupted).

        With :attr:`claim_next` set (``run --loop``: a next job is wanted), the first try also
        claims the agent's next job in the same request; it is kept in :attr:`next_claim`.
        Retries do not ask again: a first try whose answer was lost may have claimed one
        already (its lease then runs out and the reaper puts it back).
        """
        client = self.client
        retry = self.retry(self.report_timeout)
        # Stopping (a drain, an interrupt): no next job wanted.
        ask = None if self.policy.stopping or job.claim_id is None else self.claim_next
        while True:
            following, ask = ask, None
            sent_at = time.monotonic()
            call = self.waiter.call(
                partial(
                    client.update_status,
                    job.id,
                    status,
                    claim_id=job.claim_id,
                    message=message,
                    claim_next=following,
                ),
                "report",
                on_abandoned=self._give_back_claimed,
            )
            if not call.finished:
                sig = self.policy.interrupted
                assert sig is not None
                self._warn(
                    f"interrupted by {sig.name}: {status.value} not reported "
                    "(the lease will expire)"
                )
                return Outcome(Verdict.INTERRUPTED, interrupted_by=sig)
            error = call.error
            if error is None:
                claimed = getattr(call.value, "claimed", None)
                if claimed:
                    self.next_claim = (claimed[0], sent_at, time.monotonic())
                return None
            if isinstance(error, ClaimLost) and error.job_status == JobStatus.CANCELLED:
                self._warn(f"job {job.id} was cancelled: {status.value} not reported")
                return Outcome(Verdict.CANCELLED)
            if isinstance(error, NotFound):
                # Deleted (our server), or a job ctrlplane no longer has: not a lease matter.
                self._warn(
                    f"job {job.id} is gone ({describe_error(error)}): {status.value} not reported"
                )
                return Outcome(Verdict.JOB_GONE)
            if isinstance(error, ClaimLost | ClaimMismatch | JobTerminal):
                self._warn(
                    f"lease lost before the report ({describe_error(error)}): "
                    f"{status.value} not reported"
                )
                return Outcome(Verdict.LEASE_LOST)
            delay = retry.failed()
            if delay is None or not is_transient(error):
                self._warn(f"cannot report {status.value}: {describe_error(error)}")
                return Outcome(Verdict.FAILED)
            self._warn(f"report failed, retrying in {delay:.1f}s: {describe_error(error)}")
            if self.waiter.pause(delay, "report"):
                sig = self.policy.interrupted
                assert sig is not None
                return Outcome(Verdict.INTERRUPTED, interrupted_by=sig)

    def release(self, job: ClaimedJob, why: str) -> bool:
        """Put the job back in the queue (status ``queued`` with our claim id)."""
        client = self.client
        retry = self.retry(RELEASE_TIMEOUT_SECONDS)
        while True:
            call = self.waiter.call(lambda: client.release(job.id, claim_id=job.claim_id), "report")
            if not call.finished:
                return False
            if call.error is None:
                self._info(f"{why}: released job {job.id} back to the queue")
                return True
            delay = retry.failed()
            if delay is None or not is_transient(call.error):
                self._warn(
                    f"{why}: could not release job {job.id} "
                    f"({describe_error(call.error)}); its lease will expire instead"
                )
                return False
            if self.waiter.pause(delay, "report"):
                return False

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
            self._warn(
                f"claimed job {job.id} while stopping and could not release it "
                f"({describe_error(exc)}): its lease will expire"
            )
        else:
            self._info(f"claimed job {job.id} while stopping: released it")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
