"""The claiming phase: get a job (``--job ID``, or claim-next long-polling within a budget).

Without ``--loop`` any error is final (125; 7 when nothing is claimable). With ``--loop``
transient errors are retried with backoff, so an agent outlives a server restart.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from functools import partial

from jobagentctl.errors import NoJob, NotClaimable
from jobagentctl.models import ClaimedJob
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.offthread import SignalPolicy, Waiter
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.outcome import Outcome, StopReason, Verdict
from jobagentctl.supervisor.protocol import SupervisorClient, describe_error, is_transient
from jobagentctl.supervisor.reporting import Reporter
from jobagentctl.supervisor.retry import Retry

__all__ = ["Claim", "Claimer"]

# Longest single claim-next long-poll: between polls, signals and --idle-timeout are checked.
MAX_POLL_SECONDS = 30.0
# A server that answers "nothing" long before the poll's end is not polled again sooner.
MIN_POLL_GAP_SECONDS = 1.0
# The first long-poll of a process waits a random part of its wait, from this fraction up:
# agents started together (a host boot, a fleet reconnecting after a server restart) then
# re-poll spread out, not all in the same second every 30 s. Later polls wait in full.
FIRST_POLL_FRACTION = 0.5


@dataclass(frozen=True)
class Claim:
    """A claimed job, and when the claim request was sent and answered (monotonic)."""

    job: ClaimedJob
    sent_at: float
    received_at: float


@dataclass(frozen=True)
class _Attempt:
    """One claim request: when it was sent, its long-poll, and the budget's end (monotonic)."""

    sent_at: float
    poll: float
    deadline: float


@dataclass
class Claimer:
    """Claims the job a run (or each turn of ``--loop``) works on, through the main side's client. A
    job claimed too late (the run was stopped meanwhile) goes back through the ``reporter``."""

    options: RunOptions
    client: SupervisorClient
    waiter: Waiter
    policy: SignalPolicy
    reporter: Reporter
    log: Log
    _first_poll: bool = field(default=True, init=False)

    def _stopped(self) -> Outcome:
        if self.policy.draining:
            return Outcome(Verdict.STOPPED)
        return Outcome(StopReason.INTERRUPTED, interrupted_by=self.policy.interrupted)

    def acquire(self, budget: float, *, loop: bool) -> Claim | Outcome:
        """Claim a job within ``budget`` seconds, or say how the run ends."""
        policy = self.policy
        deadline = time.monotonic() + budget
        retry = self.reporter.retry(budget)
        while True:
            if policy.stopping:
                return self._stopped()
            poll = self._poll_seconds(max(0.0, deadline - time.monotonic()))
            sent_at = time.monotonic()
            call = self.waiter.call(
                partial(self._claim_once, poll), "idle", on_abandoned=self.reporter.give_back
            )
            if call.finished and call.value is not None:
                if policy.stopping:
                    # Claimed in the same instant we were told to stop: give it back.
                    self.reporter.release(call.value, "the run was stopped before the job started")
                    return self._stopped()
                return Claim(call.value, sent_at, time.monotonic())
            if not call.finished:
                # Abandoned to a signal: end the long-poll now rather than at its end (the
                # server then stops waiting without claiming); the checks at the top decide.
                interrupt = getattr(self.client, "interrupt", None)
                if policy.stopping and interrupt is not None:
                    interrupt()
                continue
            failed = self._after_error(
                call.error, _Attempt(sent_at, poll, deadline), retry, loop=loop
            )
            if failed is not None:
                return failed

    def _poll_seconds(self, remaining: float) -> float:
        """How long the next claim-next long-poll waits, ``remaining`` seconds being left."""
        opts = self.options
        poll = min(remaining, MAX_POLL_SECONDS)
        if opts.lease_seconds > 0:
            # The lease counts from when the request was sent, and a long-poll may claim
            # at its very end: keep each poll to a third of the lease, as a heartbeat.
            poll = min(poll, opts.lease_seconds / 3)
        if self._first_poll and opts.job_id is None:
            self._first_poll = False
            if poll < remaining:  # not the budget's last poll: that one keeps its end
                poll *= random.uniform(FIRST_POLL_FRACTION, 1.0)
        return poll

    def _after_error(
        self, error: BaseException | None, attempt: _Attempt, retry: Retry, *, loop: bool
    ) -> Outcome | None:
        """How the run ends after a claim that failed with ``error``; None to claim again."""
        if isinstance(error, NoJob):
            if time.monotonic() >= attempt.deadline:
                if not loop:
                    self.log.warn("no job to claim")
                return Outcome(Verdict.NO_JOB)
            if time.monotonic() - attempt.sent_at < MIN_POLL_GAP_SECONDS and attempt.poll >= 1.0:
                # The server answered "nothing" long before our wait: do not spin.
                self.waiter.pause(MIN_POLL_GAP_SECONDS, "idle")
            retry.succeeded()
            return None
        if isinstance(error, NotClaimable):
            self.log.warn(f"job {self.options.job_id} is not claimable: {error.message}")
            return Outcome(Verdict.NO_JOB)
        if loop and error is not None and is_transient(error):
            delay = retry.failed()
            if delay is None:
                return Outcome(Verdict.NO_JOB)
            self.log.warn(f"claim failed, retrying in {delay:.1f}s: {describe_error(error)}")
            self.waiter.pause(delay, "idle")
            return None
        self.log.warn(f"cannot claim a job: {describe_error(error)}")
        return Outcome(Verdict.FAILED)

    def _claim_once(self, poll: float) -> ClaimedJob:
        opts, client = self.options, self.client
        if opts.job_id is not None:
            return client.claim_job(opts.agent_id, opts.job_id, lease_seconds=opts.lease_seconds)
        return client.claim_next(opts.agent_id, lease_seconds=opts.lease_seconds, wait_seconds=poll)
