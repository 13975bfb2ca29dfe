"""The supervisor behind `jobagentctl run`: claim, run the child under a lease, report.

One main thread owns the child, its output pipes, the signals and every decision; a daemon
thread heartbeats; API calls from the main side run in short-lived threads so that a signal
never waits for a long-poll to end. Everything wakes the main thread through :class:`Events`.

The phases live in their own modules behind narrow interfaces:

- :mod:`.claiming`: a job, or an :class:`Outcome`;
- :mod:`.watching`: the child's run → :class:`ChildEnd`;
- :mod:`.reporting`: → :class:`Outcome`.

:func:`.outcome.exit_code` alone picks the number.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import time
from collections.abc import Callable, Iterator
from functools import partial

from jobagentctl.durations import format_duration
from jobagentctl.models import REDACT_SOCKET_ENV, RUN_PID_ENV, ClaimedJob, ClaimNext, JobStatus
from jobagentctl.supervisor.claiming import Claim, Claimer
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.events import Events
from jobagentctl.supervisor.lease.cancel_poll import ClaimWatcher
from jobagentctl.supervisor.lease.heartbeat import Heartbeater
from jobagentctl.supervisor.lease.job_lease import JobLease
from jobagentctl.supervisor.offthread import SignalPolicy, Waiter
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.outcome import Outcome, StopReason, Verdict, exit_code
from jobagentctl.supervisor.output.redact import (
    Redactor,
    api_key_secrets,
    secrets_from_context,
    secrets_from_environment,
)
from jobagentctl.supervisor.output.relay import LastOutput, Relay, relayed_stderr
from jobagentctl.supervisor.output.shipping import Shipper
from jobagentctl.supervisor.process.child import Child, SpawnError
from jobagentctl.supervisor.process.handover import HandoverSocket
from jobagentctl.supervisor.process.jobfiles import (
    JobFiles,
    child_environment,
    sweep_stale_job_files,
)
from jobagentctl.supervisor.protocol import SupervisorClient
from jobagentctl.supervisor.report_file import JobRecord, open_report, utc_now, write_record
from jobagentctl.supervisor.reporting import Reporter
from jobagentctl.supervisor.watching import ChildEnd, Watch

__all__ = ["Supervisor"]


class Supervisor:
    """Runs `jobagentctl run`: one job, or jobs in a loop. Call :meth:`run` in the main thread.

    ``client_factory`` makes API clients: one for the main side, and two per job. One is the
    heartbeat thread's, so a slow heartbeat never holds up a report on a shared connection. One is
    the claim long-poll thread's, whose connection stays open while the job runs.
    """

    def __init__(
        self,
        options: RunOptions,
        client_factory: Callable[[], SupervisorClient],
        *,
        log: Log | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.options = options
        self._factory = client_factory
        self._log = log or Log()
        self._rng = rng or random.Random()
        self.policy = SignalPolicy(loop=options.loop)
        self.records: list[JobRecord] = []
        self.outcome: Outcome | None = None
        self._lease: JobLease | None = None
        self._relays: dict[str, Relay] = {}
        # Ship output to the job's log (``--no-ship-output``, ``--no-capture``: never).
        self._ship = options.ship_output and options.capture
        # The last job found the server without logs (said once): the next asks it again, as
        # the server may have been upgraded meanwhile.
        self._no_logs = False
        # Redacted from whatever leaves the machine, in every job: the API key in use (and its
        # secret part alone) and the values of the variables whose names say they are secrets.
        self._secrets = [
            *(api_key_secrets(options.api_key) if options.api_key else []),
            *secrets_from_environment(os.environ, options.redact_patterns),
        ]

    @property
    def draining(self) -> bool:
        """Whether a SIGTERM asked ``--loop`` to finish the current job and claim no more."""
        return self.policy.draining

    @property
    def interrupted(self) -> signal.Signals | None:
        """The signal that told the run to stop, if one did."""
        return self.policy.interrupted

    def run(self) -> int:
        """The whole run; returns its exit code (:func:`exit_code`)."""
        self.outcome = self.run_outcome()
        return exit_code(self.outcome)

    def run_outcome(self) -> Outcome:
        """The whole run; returns how it ended (:meth:`run` makes that the exit code)."""
        # Our stdout and stderr are written by relays: a reader that never reads blocks
        # neither the command's supervision nor our own messages (see relay.py).
        self._relays = {"stdout": Relay(1, name="stdout"), "stderr": Relay(2, name="stderr")}
        try:
            with relayed_stderr(self._relays["stderr"]):
                return self._run_outcome()
        finally:
            self._flush_relays()

    def _flush_relays(self) -> None:
        dropped = {name: relay.flush(self.options.grace) for name, relay in self._relays.items()}
        lost = {name: n for name, n in dropped.items() if n}
        if lost:
            what = ", ".join(f"{n} bytes of {name}" for name, n in lost.items())
            message = f"jobagentctl: {what} could not be written (not read in time): dropped\n"
            # Best effort, never blocking: our stderr may be the reader that does not read.
            with contextlib.suppress(OSError):
                if select.select([], [2], [], 0)[1]:
                    os.write(2, message.encode())

    def _run_outcome(self) -> Outcome:
        log = self._log
        if not self._report_writable():
            return Outcome(Verdict.FAILED)
        client = self._factory()
        swept = sweep_stale_job_files()
        if swept:
            log.debug(f"removed the job files of {swept} run(s) killed before cleaning up")
        with Events() as events:
            suspend = partial(self._suspend, None)
            waiter = Waiter(events, self.policy, on_news=self._on_news, suspend=suspend, log=log)
            reporter = Reporter(
                client, waiter, self.policy,
                report_timeout=self.options.report_timeout, rng=self._rng, log=log,
            )  # fmt: skip
            claimer = Claimer(self.options, client, waiter, self.policy, reporter, log)
            try:
                if self.options.loop:
                    return self._run_loop(claimer, reporter, events)
                started_at = utc_now()
                claimed = claimer.acquire(self.options.wait, loop=False)
                if isinstance(claimed, Outcome):
                    # No job: the record still says why, so a script never has to guess
                    # from an exit code the command could have chosen too.
                    record = JobRecord(None, None, None, started_at, verdict=claimed.verdict)
                    record.finished_at = utc_now()
                    self._write_record(record)
                    return claimed
                return self._run_job(claimed, reporter, events)
            finally:
                if waiter.join_abandoned():
                    client.close()

    def _run_loop(self, claimer: Claimer, reporter: Reporter, events: Events) -> Outcome:
        opts, done = self.options, 0
        try:
            while True:
                if self.policy.draining:
                    self._log.info("drained: exiting")
                    return Outcome(Verdict.STOPPED)
                if opts.max_jobs is not None and done >= opts.max_jobs:
                    self._log.info(f"ran {done} job(s) (--max-jobs): exiting")
                    return Outcome(Verdict.STOPPED)
                # The last report may have claimed this job already (one request for both).
                following = reporter.take_next_claim()
                if following is not None:
                    claimed: Claim | Outcome = Claim(*following)
                else:
                    claimed = claimer.acquire(min(opts.wait, opts.idle_timeout), loop=True)
                if isinstance(claimed, Outcome):
                    if claimed.verdict is Verdict.NO_JOB:
                        self._log.info("no job came within the idle limit: exiting")
                        return Outcome(Verdict.STOPPED)
                    return claimed
                last = opts.max_jobs is not None and done + 1 >= opts.max_jobs
                wanted = opts.job_id is None and opts.lease_seconds > 0 and not last
                ask = ClaimNext(lease_seconds=opts.lease_seconds) if wanted else None
                reporter.claim_next = ask
                self._run_job(claimed, reporter, events)
                done += 1
                if self.policy.interrupted is not None:
                    return Outcome(StopReason.INTERRUPTED, interrupted_by=self.policy.interrupted)
        finally:
            # Claimed with the last report but not to be run (drained, interrupted, failed):
            # back to the queue at once rather than when its lease runs out.
            unused = reporter.take_next_claim()
            if unused is not None:
                reporter.release(unused[0], "the loop ended before it started")

    def _on_news(self, news: object) -> None:
        """News from a thread while no child runs (a heartbeat verdict while reporting)."""
        lease = self._lease
        if lease is not None and (beat := lease.note(news)) is not None:
            self._log.debug(f"heartbeat verdict: {beat} ({lease.why})")

    def _suspend(self, child: Child | None) -> None:
        """Ctrl-Z (SIGTSTP): stop the command's group, then ourselves; on resume, the group.

        The command runs in a session of its own, where the terminal's SIGTSTP does not reach it,
        hence SIGSTOP. A SIGTSTP of ours would be discarded too (an orphaned group).
        """
        lease = self._lease
        lapse = ""
        if lease is not None and lease.leased:
            left = max(0.0, lease.deadline - time.monotonic())
            lapse = (
                f"; no heartbeats while suspended: resume within "
                f"{format_duration(round(left))} or the lease is lost"
            )
        self._log.warn(
            f"SIGTSTP: suspending {'the command and ' if child else ''}jobagentctl{lapse}"
        )
        self._relays["stderr"].drain(1.0)  # the message first, if stderr takes it
        if child is not None:
            child.signal_group(signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)
        # Resumed.
        if child is not None:
            child.signal_group(signal.SIGCONT)
        self._log.info("resumed" + (": the command too" if child else ""))

    # --- one job -----------------------------------------------------------------------------

    def _run_job(self, claim: Claim, reporter: Reporter, events: Events) -> Outcome:
        opts, log, job = self.options, self._log, claim.job
        record = JobRecord(
            job_id=job.id, claim_id=job.claim_id, attempt=job.attempt, started_at=utc_now()
        )
        started = time.monotonic()
        lease = self._lease = JobLease(job, claim.sent_at, claim.received_at)
        last_output = LastOutput()
        if lease.leased:
            self._keep(lease, events, last_output)
            lease_text = f"lease {job.lease_seconds}s"
        else:
            lease_text = "unleased: no heartbeats"
        attempt = f"attempt {job.attempt}, " if job.attempt is not None else ""
        log.info(f"claimed job {job.id} ({attempt}{lease_text})")
        files: JobFiles | None = None
        redactor = self._redactor(claim)
        try:
            files = JobFiles(job)
            end = self._execute(claim, files, lease, events, (redactor, last_output))
            outcome = reporter.settle(
                job, end, record, timeout=opts.timeout, lease_verdict=lease.verdict,
                no_output_timeout=opts.no_output_timeout, redact=redactor.redact_text,
            )  # fmt: skip
        except OSError as exc:
            # Our side failed before the child could start (no temp dir, …): give the job back.
            log.warn(f"cannot prepare the job: {exc}")
            if reporter.release(job, "jobagentctl failed"):
                record.status, record.reported = JobStatus.QUEUED.value, True
            outcome = Outcome(Verdict.FAILED)
        finally:
            self._lease = None
            record.heartbeats, record.heartbeat_failures = lease.close()
            if files is not None:
                files.remove()
        record.verdict = outcome.verdict
        record.finished_at = utc_now()
        record.duration_seconds = time.monotonic() - started
        self.records.append(record)
        self._write_record(record)
        log.info(
            f"job {job.id}: {record.status or 'not reported'}"
            f" (exit {exit_code(outcome)}, {format_duration(record.duration_seconds)},"
            f" {record.heartbeats} heartbeat(s))"
        )
        return outcome

    def _redactor(self, claim: Claim) -> Redactor:
        """The job's redactor: the run's secrets and those of the job's dispatch context."""
        context = secrets_from_context(claim.job.dispatch_context, self.options.redact_patterns)
        redactor = Redactor([*self._secrets, *context])
        self._log.debug(f"redacting {redactor.count} value(s) from what is sent to the server")
        return redactor

    def _keep(self, lease: JobLease, events: Events, last_output: LastOutput) -> None:
        """Start the threads that keep ``lease``: heartbeats, and the claim long-poll, which brings
        a cancel within about a second whatever the lease. Each has a client of its own: a slow
        heartbeat never holds up a report, and a long-poll keeps its connection. Their news comes to
        the main loop through ``events``."""
        job, log, rng = lease.job, self._log, self._rng
        assert lease.lease is not None and job.claim_id is not None
        heartbeater = Heartbeater(
            self._factory(), job.id, job.claim_id, lease.lease,
            post=events.post, log=log, rng=rng, last_output=lambda: last_output.at,
        )  # fmt: skip
        watcher = ClaimWatcher(
            self._factory(), job.id, job.claim_id,
            confirm=heartbeater.beat_once, post=events.post, log=log, rng=rng,
        )  # fmt: skip
        lease.keep(heartbeater, watcher)

    def _report_writable(self) -> bool:
        """Open (and without --loop empty) --report before claiming. A path that cannot be written
        fails the run now (125), not after the job ran with no verdict to show."""
        path = self.options.report_path
        if path is None:
            return True
        try:
            open_report(path, append=self.options.loop)
        except OSError as exc:
            self._log.warn(
                f"cannot write --report {path}: {exc.strerror or exc}; nothing was claimed"
            )
            return False
        return True

    def _write_record(self, record: JobRecord) -> None:
        path = self.options.report_path
        if path is not None:
            try:
                write_record(path, record, append=self.options.loop)
            except OSError as exc:
                self._log.warn(f"cannot write --report {path}: {exc}")

    def _execute(
        self,
        claim: Claim,
        files: JobFiles,
        lease: JobLease,
        events: Events,
        output: tuple[Redactor, LastOutput],
    ) -> ChildEnd | SpawnError:
        """Start the command (unless the claim is already gone) and watch it to its end.

        Its output goes through ``output``'s redactor to the tail and the job's log, and sets
        its last-output clock.
        """
        gone = lease.gone_before_start()
        if gone is not None:
            return ChildEnd(returncode=None, reason=gone, tail="")
        env = child_environment(os.environ, claim.job, self.options, files)
        with self._handover(output[0], env) as handover:
            child = self._spawn(env, files, lease)
            if isinstance(child, SpawnError):
                return child
            if handover is not None:
                # From its start, the handover takes values from the command's processes.
                handover.admit(child.pgid)  # the command leads a session of its own
            with self._shipping(claim.job) as shipper:
                watch = Watch(
                    self.options, child, files, lease, events, self.policy, self._relays,
                    suspend=self._suspend, log=self._log, redactor=output[0], clock=output[1],
                    sinks=[shipper] if shipper else [],
                )  # fmt: skip
                return watch.run()

    @contextlib.contextmanager
    def _handover(self, redactor: Redactor, env: dict[str, str]) -> Iterator[HandoverSocket | None]:
        """The socket `jobagentctl redact add` reaches (named in ``env``), closed on leaving.

        None if it cannot be made: the job still runs, only hand-overs fail.
        """
        try:
            handover = HandoverSocket(redactor, self._log)
        except OSError as exc:
            self._log.warn(f"cannot listen for `redact add` (it will fail in this job): {exc}")
            env.pop(REDACT_SOCKET_ENV, None)
            env.pop(RUN_PID_ENV, None)
            yield None
            return
        env.update(handover.environment())
        try:
            yield handover
        finally:
            handover.close()

    def _spawn(self, env: dict[str, str], files: JobFiles, lease: JobLease) -> Child | SpawnError:
        """Start the command under the watchdog; the spawn error (said on stderr) if it fails."""
        opts = self.options
        try:
            # The watchdog enforces the lease even if we die or freeze (docs/run.md), unless
            # the user asked the command to outlive a lost lease.
            enforce = lease.lease if opts.on_lease_lost == "stop" else None
            child = Child.start(
                opts.command, env, capture=opts.capture,
                lease_deadline=enforce.deadline if enforce else None, grace=opts.grace,
                stop_signal=opts.stop_signal, stop_reason_file=files.stop_reason_file,
            )  # fmt: skip
        except SpawnError as exc:
            self._log.warn(exc.message)
            return exc
        if enforce is not None:
            enforce.on_renew = child.lease_holds_until
            child.lease_holds_until(enforce.deadline)  # a renewal while it started
        return child

    @contextlib.contextmanager
    def _shipping(self, job: ClaimedJob) -> Iterator[Shipper | None]:
        """The job's :meth:`_shipper`, closed on leaving: the last output reaches the log
        before the result is reported (bounded)."""
        shipper = self._shipper(job)
        try:
            yield shipper
        finally:
            if shipper is not None:
                shipper.close()
                if shipper.appends and self._no_logs:
                    self._no_logs = False
                    self._log.info("the server keeps job logs now: output is shipped again")

    def _shipper(self, job: ClaimedJob) -> Shipper | None:
        """A started :class:`Shipper` for the job's output, on a client of its own (a slow
        append never holds up a heartbeat); None when output is not shipped: ``--no-capture``,
        ``--no-ship-output``, or an unleased claim (no claim id to fence the log with: said
        once). A server found without logs is asked again at each job."""
        if not self._ship:
            return None
        if job.claim_id is None:
            self._ship = False
            self._log.info(
                "output is not shipped to the job's log: an unleased claim has no claim id "
                "to fence it with"
            )
            return None
        client = self._factory()
        if self._no_logs:
            client.recheck_logs()
        shipper = Shipper(
            client, job.id, job.claim_id,
            log=self._log, on_unsupported=self._logs_unsupported, rng=self._rng,
        )  # fmt: skip
        shipper.start()
        return shipper

    def _logs_unsupported(self, why: str) -> None:
        """From a shipper's thread: the server has no log endpoint. Said once until a job
        finds it has one again."""
        if self._no_logs:
            self._log.debug(f"still no job logs on the server: {why}")
            return
        self._no_logs = True
        self._log.warn(
            f"{why}; each job asks the server again, and the failure report still carries "
            "the output's tail"
        )
