"""The supervisor behind `jobagentctl run`: claim, run the child under a lease, report.

One main thread owns the child, its output pipes, the signals and every decision; a daemon
thread heartbeats; API calls from the main side run in short-lived threads so that a signal
never waits for a long-poll to end. Everything wakes the main thread through :class:`Events`.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import select
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, Literal, TypeVar
from uuid import UUID

from jobagentctl.durations import format_duration
from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    JobTerminal,
    NoJob,
    NotClaimable,
    NotFound,
)
from jobagentctl.models import ClaimedJob, JobStatus
from jobagentctl.supervisor.child import (
    Child,
    JobFiles,
    SpawnError,
    child_environment,
    sweep_stale_job_files,
)
from jobagentctl.supervisor.events import Events, SignalReceived
from jobagentctl.supervisor.heartbeat import Beat, Heartbeater, Lease
from jobagentctl.supervisor.options import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_LEASE_LOST,
    EXIT_NO_JOB,
    EXIT_OK,
    EXIT_TIMEOUT,
    MAX_POLL_SECONDS,
    RunOptions,
)
from jobagentctl.supervisor.protocol import SupervisorClient, describe_error, is_transient
from jobagentctl.supervisor.record import JobRecord, utc_now, write_record
from jobagentctl.supervisor.tail import OutputTail

__all__ = ["Log", "Supervisor"]

T = TypeVar("T")

# The API's limit on a status message (characters); the output tail is cut to fit.
MAX_MESSAGE_CHARS = 65536
# How long a release after an interrupt is retried: the user asked us to stop, so not long.
RELEASE_TIMEOUT_SECONDS = 10.0
# Backoff between report or claim retries: starts here, doubles, capped, jittered.
RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 15.0
# Upper bound on any select() so a missed wake-up costs at most this much.
TICK_SECONDS = 1.0
# The main loop gives the heartbeat thread this long to finish its request when a job ends.
HEARTBEAT_JOIN_SECONDS = 1.0
# On exit, how long an abandoned claim may still take to answer (and be released).
ABANDONED_JOIN_SECONDS = 1.0

Phase = Literal["idle", "child", "report"]
Action = Literal["drain", "interrupt", "kill", "forward"]


def _stderr(message: str) -> None:
    sys.stderr.write(f"jobagentctl: {message}\n")
    sys.stderr.flush()


def _silent(message: str) -> None:
    del message


@dataclass(frozen=True)
class Log:
    """Where the supervisor's conversation goes (stderr by default; the CLI decides)."""

    info: Callable[[str], None] = _stderr
    warn: Callable[[str], None] = _stderr
    debug: Callable[[str], None] = _silent


@dataclass
class _Call(Generic[T]):
    """One API call running in its own thread; the main loop waits on :class:`Events`.

    A call the main loop stops waiting for (a signal) is *abandoned*: if it still succeeds,
    its thread hands the value to ``on_abandoned`` (e.g. releases a job claimed too late).
    """

    value: T | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def abandon(self) -> bool:
        """Stop waiting; False when it finished first (the caller then has the result)."""
        with self.lock:
            if not self.done.is_set():
                self.abandoned = True
        return self.abandoned


@dataclass(frozen=True)
class _Verdict:
    """News from a heartbeat thread: the claim of ``job_id`` is gone."""

    job_id: UUID
    beat: Beat
    why: str


@dataclass
class _Outcome:
    """How the child's run ended, before reporting."""

    returncode: int | None = None  # None: never started
    reason: str | None = None  # lease_lost | cancelled | timeout | interrupted
    spawn_error: SpawnError | None = None
    tail: str = ""


class Supervisor:
    """Runs `jobagentctl run`: one job, or jobs in a loop. Call :meth:`run` in the main thread.

    ``client_factory`` makes API clients: one for the main side, one per job for the
    heartbeat thread (so a slow heartbeat never holds up a report on a shared connection).
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
        self._client: SupervisorClient | None = None
        self._events: Events | None = None
        self.draining = False
        self.interrupted: signal.Signals | None = None
        self._abandoned: list[threading.Thread] = []
        self._heartbeater: Heartbeater | None = None
        self._verdict: tuple[Beat, str] | None = None
        self._job_id: UUID | None = None
        self.records: list[JobRecord] = []

    # --- entry points ------------------------------------------------------------------------

    def run(self) -> int:
        """The whole run; returns the exit code of SPEC §6.9."""
        self._client = self._factory()
        swept = sweep_stale_job_files()
        if swept:
            self._log.debug(f"removed the job files of {swept} run(s) killed before cleaning up")
        with Events() as events:
            self._events = events
            try:
                return self._run_loop() if self.options.loop else self._run_single()
            finally:
                self._events = None
                # A claim abandoned to a signal may still answer: give it a moment to, so a
                # job claimed in that instant goes back to the queue now, not at lease expiry.
                deadline = time.monotonic() + ABANDONED_JOIN_SECONDS
                for thread in self._abandoned:
                    thread.join(max(0.0, deadline - time.monotonic()))
                if not any(thread.is_alive() for thread in self._abandoned):
                    self._client.close()

    def _run_single(self) -> int:
        claimed = self._acquire(self.options.wait, loop=False)
        if isinstance(claimed, int):
            return claimed
        return self._run_job(*claimed)

    def _run_loop(self) -> int:
        done = 0
        while True:
            if self.draining:
                self._log.info("drained: exiting")
                return EXIT_OK
            if self.options.max_jobs is not None and done >= self.options.max_jobs:
                self._log.info(f"ran {done} job(s) (--max-jobs): exiting")
                return EXIT_OK
            claimed = self._acquire(min(self.options.wait, self.options.idle_timeout), loop=True)
            if isinstance(claimed, int):
                if claimed == EXIT_NO_JOB:
                    self._log.info("no job came within the idle limit: exiting")
                    return EXIT_OK
                return claimed
            self._run_job(*claimed)
            done += 1
            if self.interrupted is not None:
                return 128 + self.interrupted

    # --- claiming ----------------------------------------------------------------------------

    def _acquire(self, budget: float, *, loop: bool) -> tuple[ClaimedJob, float, float] | int:
        """Claim a job within ``budget`` seconds: the job and when the claim request was sent
        and answered (monotonic), or an exit code.

        Without --loop, any error is final (125; 7 when nothing is claimable). With --loop,
        transient errors are retried with backoff, so an agent outlives a server restart.
        """
        assert self._client is not None
        client, opts = self._client, self.options
        deadline = time.monotonic() + budget
        failures = 0
        while True:
            if self.draining:
                return EXIT_OK
            if self.interrupted is not None:
                return 128 + self.interrupted
            remaining = max(0.0, deadline - time.monotonic())
            poll = min(remaining, MAX_POLL_SECONDS)
            if opts.lease_seconds > 0:
                # The lease counts from when the request was sent, and a long-poll may claim
                # at its very end: keep each poll to a third of the lease, as a heartbeat.
                poll = min(poll, opts.lease_seconds / 3)
            sent_at = time.monotonic()
            call = self._call(
                partial(self._claim_once, client, poll), "idle", on_abandoned=self._give_back
            )
            if call.finished and call.value is not None:
                if self.draining or self.interrupted is not None:
                    # Claimed in the same instant we were told to stop: give it back.
                    self._release(call.value, "the run was stopped before the job started")
                    return EXIT_OK if self.draining else 128 + (self.interrupted or 0)
                return call.value, sent_at, time.monotonic()
            if not call.finished:
                continue  # abandoned to a signal: the checks at the top decide
            error = call.error
            if isinstance(error, NoJob):
                if time.monotonic() >= deadline:
                    if not loop:
                        self._log.warn("no job to claim")
                    return EXIT_NO_JOB
                if time.monotonic() - sent_at < 1.0 and poll >= 1.0:
                    # The server answered "nothing" long before our wait: do not spin.
                    self._pause(1.0, "idle")
                failures = 0
                continue
            if isinstance(error, NotClaimable):
                self._log.warn(f"job {opts.job_id} is not claimable: {error.message}")
                return EXIT_NO_JOB
            if loop and error is not None and is_transient(error):
                failures += 1
                delay = self._retry_delay(failures)
                self._log.warn(f"claim failed, retrying in {delay:.1f}s: {describe_error(error)}")
                if time.monotonic() + delay >= deadline:
                    return EXIT_NO_JOB
                self._pause(delay, "idle")
                continue
            self._log.warn(f"cannot claim a job: {describe_error(error)}")
            return EXIT_FAILED

    def _give_back(self, job: ClaimedJob) -> None:
        """From an abandoned claim's thread: a job came after we stopped waiting."""
        assert self._client is not None
        try:
            self._client.release(job.id, claim_id=job.claim_id)
        except Exception as exc:
            self._log.warn(
                f"claimed job {job.id} while stopping and could not release it "
                f"({describe_error(exc)}): its lease will expire"
            )
        else:
            self._log.info(f"claimed job {job.id} while stopping: released it")

    def _claim_once(self, client: SupervisorClient, poll: float) -> ClaimedJob:
        opts = self.options
        if opts.job_id is not None:
            return client.claim_job(opts.agent_id, opts.job_id, lease_seconds=opts.lease_seconds)
        return client.claim_next(opts.agent_id, lease_seconds=opts.lease_seconds, wait_seconds=poll)

    # --- one job -----------------------------------------------------------------------------

    def _run_job(self, job: ClaimedJob, sent_at: float, received_at: float) -> int:
        opts = self.options
        record = JobRecord(
            job_id=job.id, claim_id=job.claim_id, attempt=job.attempt, started_at=utc_now()
        )
        started = time.monotonic()
        self._verdict = None
        self._job_id = job.id
        lease: Lease | None = None
        early: Beat | None = None
        if job.claim_id is not None and job.lease_seconds:
            lease = Lease(sent_at, job.lease_seconds)
            self._heartbeater = Heartbeater(
                self._factory(),
                job.id,
                job.claim_id,
                lease,
                on_verdict=partial(self._on_verdict, job.id),
                log=self._log.warn,
                debug=self._log.debug,
                rng=self._rng,
            )
            if received_at - sent_at > job.lease_seconds / 3:
                # The claim took a good part of the lease (a long-poll, and a server that
                # granted less than we asked): heartbeat now, so the lease counts from here.
                early = self._heartbeater.beat_once()
            self._heartbeater.start()
            lease_text = f"lease {job.lease_seconds}s"
        else:
            lease_text = "unleased: no heartbeats"
        attempt = f"attempt {job.attempt}, " if job.attempt is not None else ""
        self._log.info(f"claimed job {job.id} ({attempt}{lease_text})")
        files: JobFiles | None = None
        try:
            files = JobFiles(job)
            outcome = self._execute(job, files, lease, early)
            code = self._settle(job, outcome, record)
        except OSError as exc:
            # Our side failed before the child could start (no temp dir, …): give the job back.
            self._log.warn(f"cannot prepare the job: {exc}")
            if self._release(job, "jobagentctl failed"):
                record.status, record.reported = JobStatus.QUEUED.value, True
            code = EXIT_FAILED
        finally:
            hb = self._heartbeater
            self._heartbeater = None
            if hb is not None:
                hb.stop(HEARTBEAT_JOIN_SECONDS)
                record.heartbeats, record.heartbeat_failures = hb.beats, hb.failures
                if not hb.running:
                    hb.client.close()
            if files is not None:
                files.remove()
        record.finished_at = utc_now()
        record.duration_seconds = time.monotonic() - started
        self.records.append(record)
        if opts.report_path is not None:
            try:
                write_record(opts.report_path, record, append=opts.loop)
            except OSError as exc:
                self._log.warn(f"cannot write --report {opts.report_path}: {exc}")
        self._log.info(
            f"job {job.id}: {record.status or 'not reported'}"
            f" (exit {code}, {format_duration(record.duration_seconds)},"
            f" {record.heartbeats} heartbeat(s))"
        )
        return code

    def _on_verdict(self, job_id: UUID, verdict: Beat, why: str) -> None:
        """From the heartbeat thread: the claim is gone. The main loop acts on it."""
        events = self._events
        if events is not None:
            events.post(_Verdict(job_id, verdict, why))

    def _execute(
        self, job: ClaimedJob, files: JobFiles, lease: Lease | None, early: Beat | None
    ) -> _Outcome:
        opts = self.options
        if lease is not None:
            # The claim may already be gone (the early heartbeat's verdict) or its local
            # deadline past: then the command must not start at all.
            if early in (Beat.LEASE_LOST, Beat.CANCELLED):
                assert early is not None
                self._verdict = (early, "the claim was gone before the command started")
                return _Outcome(reason=early.value)
            if time.monotonic() >= lease.deadline:
                self._verdict = (Beat.LEASE_LOST, "the lease ran out before the command started")
                return _Outcome(reason="lease_lost")
        env = child_environment(os.environ, job, opts, files)
        try:
            child = Child.start(opts.command, env, capture=opts.capture)
        except SpawnError as exc:
            self._log.warn(exc.message)
            return _Outcome(spawn_error=exc)
        return _Watch(self, child, files, lease).run()

    def _settle(self, job: ClaimedJob, outcome: _Outcome, record: JobRecord) -> int:
        """Turn the outcome into the report (or release), the record, and the exit code."""
        opts = self.options
        record.reason = outcome.reason
        rc = outcome.returncode
        if outcome.spawn_error is not None:
            record.exit_code = outcome.spawn_error.exit_code
        elif rc is not None and rc < 0:
            record.signal = -rc
        else:
            record.exit_code = rc

        if outcome.reason == "interrupted":
            sig = self.interrupted or signal.SIGTERM
            if self._release(job, f"interrupted by {sig.name}"):
                record.status, record.reported = JobStatus.QUEUED.value, True
            return 128 + sig
        if outcome.reason == "cancelled":
            record.status = JobStatus.CANCELLED.value
            self._log.warn(f"job {job.id} was cancelled: stopped it")
            return EXIT_CANCELLED
        if outcome.reason == "lease_lost":
            why = self._verdict[1] if self._verdict else "the lease expired"
            self._log.warn(f"lease lost ({why}): the result is not reported")
            return EXIT_LEASE_LOST

        if outcome.spawn_error is not None:
            status, message = JobStatus.FAILURE, outcome.spawn_error.message
            code = outcome.spawn_error.exit_code
        elif outcome.reason == "timeout":
            status = JobStatus.FAILURE
            message = f"timed out after {format_duration(opts.timeout)}"
            code = EXIT_TIMEOUT
        elif rc == 0:
            status, message, code = JobStatus.SUCCESSFUL, None, EXIT_OK
        elif rc is not None and rc < 0:
            status = JobStatus.FAILURE
            message = f"killed by signal {-rc} ({_signal_name(-rc)})"
            code = 128 - rc
        else:
            status, message, code = JobStatus.FAILURE, f"exit code {rc}", int(rc or 0)
        if message is not None and outcome.tail:
            room = MAX_MESSAGE_CHARS - len(message) - 1
            message = f"{message}\n{outcome.tail[-room:]}" if room > 0 else message
        result = self._report(job, status, message)
        if result is None:
            record.status, record.reported = status.value, True
            return code
        if result == EXIT_CANCELLED:
            record.status = JobStatus.CANCELLED.value
        return result

    # --- reporting ---------------------------------------------------------------------------

    def _report(self, job: ClaimedJob, status: JobStatus, message: str | None) -> int | None:
        """Report the terminal status, retrying while heartbeating. None, or the exit code."""
        assert self._client is not None
        client = self._client
        deadline = time.monotonic() + self.options.report_timeout
        failures = 0
        while True:
            call = self._call(
                lambda: client.update_status(
                    job.id, status, claim_id=job.claim_id, message=message
                ),
                "report",
            )
            if not call.finished:
                assert self.interrupted is not None
                self._log.warn(
                    f"interrupted by {self.interrupted.name}: {status.value} "
                    "not reported (the lease will expire)"
                )
                return 128 + self.interrupted
            error = call.error
            if error is None:
                return None
            if isinstance(error, ClaimLost) and error.job_status == "cancelled":
                self._log.warn(f"job {job.id} was cancelled: {status.value} not reported")
                return EXIT_CANCELLED
            if isinstance(error, ClaimLost | ClaimMismatch | JobTerminal | NotFound):
                self._log.warn(
                    f"lease lost before the report ({describe_error(error)}): "
                    f"{status.value} not reported"
                )
                return EXIT_LEASE_LOST
            failures += 1
            delay = self._retry_delay(failures)
            if not is_transient(error) or time.monotonic() + delay > deadline:
                self._log.warn(f"cannot report {status.value}: {describe_error(error)}")
                return EXIT_FAILED
            self._log.warn(f"report failed, retrying in {delay:.1f}s: {describe_error(error)}")
            if self._pause(delay, "report"):
                assert self.interrupted is not None
                return 128 + self.interrupted

    def _release(self, job: ClaimedJob, why: str) -> bool:
        """Put the job back in the queue (status ``queued`` with our claim id)."""
        assert self._client is not None
        client = self._client
        deadline = time.monotonic() + RELEASE_TIMEOUT_SECONDS
        failures = 0
        while True:
            call = self._call(lambda: client.release(job.id, claim_id=job.claim_id), "report")
            if not call.finished:
                return False
            if call.error is None:
                self._log.info(f"{why}: released job {job.id} back to the queue")
                return True
            failures += 1
            delay = self._retry_delay(failures)
            if not is_transient(call.error) or time.monotonic() + delay > deadline:
                self._log.warn(
                    f"{why}: could not release job {job.id} "
                    f"({describe_error(call.error)}); its lease will expire instead"
                )
                return False
            if self._pause(delay, "report"):
                return False

    def _retry_delay(self, failures: int) -> float:
        capped = min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2.0 ** min(failures - 1, 16))
        return capped * self._rng.uniform(0.5, 1.0)

    # --- waiting outside the child -----------------------------------------------------------

    def _call(
        self,
        fn: Callable[[], T],
        phase: Phase,
        *,
        on_abandoned: Callable[[T], None] | None = None,
    ) -> _Call[T]:
        """Run ``fn`` in a thread and wait for it, handling signals meanwhile.

        Returns the call unfinished when a signal asked us to stop waiting; the thread (a
        daemon) is then abandoned, and a late result goes to ``on_abandoned``.
        """
        call: _Call[T] = _Call()
        events = self._events
        assert events is not None

        def target() -> None:
            try:
                call.value = fn()
            except BaseException as exc:  # handed to the main thread, which decides
                call.error = exc
            with call.lock:
                call.done.set()
                late = call.abandoned
            if late and call.value is not None and on_abandoned is not None:
                on_abandoned(call.value)
            events.post(call)

        call.thread = threading.Thread(target=target, name="jobagentctl-call", daemon=True)
        call.thread.start()
        if self._wait_until(math.inf, call.done.is_set, phase) and call.abandon():
            self._abandoned.append(call.thread)
        return call

    def _pause(self, seconds: float, phase: Phase) -> bool:
        """Sleep ``seconds`` unless a signal says stop (True)."""
        return self._wait_until(time.monotonic() + seconds, lambda: False, phase)

    def _wait_until(self, deadline: float, done: Callable[[], bool], phase: Phase) -> bool:
        """Wait for ``done()`` or ``deadline``; True when a signal asked us to stop waiting."""
        events = self._events
        assert events is not None
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([events.read_fd], [], [], min(remaining, TICK_SECONDS))
            for event in events.drain():
                if isinstance(event, SignalReceived):
                    if self._signal_outside_child(event.signum, phase):
                        return True
                elif isinstance(event, _Verdict):
                    self._note_verdict(event)
        return False

    def _note_verdict(self, event: _Verdict) -> Beat | None:
        """Record a heartbeat verdict about the current job; the verdict if it is news."""
        if event.job_id != self._job_id or self._verdict is not None:
            return None
        self._verdict = (event.beat, event.why)
        self._log.debug(f"heartbeat verdict: {event.beat.value} ({event.why})")
        return event.beat

    def _signal_outside_child(self, signum: signal.Signals, phase: Phase) -> bool:
        """A signal while no child runs. True when the current wait must end."""
        action = self.classify(signum)
        if action == "drain":
            self._log.info(f"{signum.name}: draining (no new jobs)")
            # While claiming, stop now; while reporting, the current job is finished first.
            return phase == "idle"
        if action in ("interrupt", "kill"):
            if action == "kill":
                self._log.warn(f"{signum.name} again: giving up at once")
            return True
        self._log.debug(f"{signum.name}: no child to forward it to")
        return False

    def classify(self, signum: signal.Signals) -> Action:
        """What a signal means now (and record it): SPEC §6.7."""
        if signum == signal.SIGTERM and self.options.loop and not self.draining:
            self.draining = True
            return "drain"
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if self.interrupted is None:
                self.interrupted = signum
                return "interrupt"
            if signum != signal.SIGHUP:
                return "kill"
        return "forward"


class _Watch:
    """The main loop while a child runs: output, signals, lease, timeout and stopping."""

    def __init__(self, sup: Supervisor, child: Child, files: JobFiles, lease: Lease | None):
        self.sup = sup
        self.opts = sup.options
        self.child = child
        self.files = files
        self.lease = lease
        self.tail = OutputTail(self.opts.output_tail_bytes)
        self.reason: str | None = None
        self.lease_lost = False
        self.kill_at: float | None = None
        self.killed = False
        self.started = time.monotonic()
        self.timeout_at = self.started + self.opts.timeout
        self.selector = selectors.DefaultSelector()
        self.passthrough = {"stdout": 1, "stderr": 2}
        assert sup._events is not None
        self.events = sup._events
        self.selector.register(self.events.read_fd, selectors.EVENT_READ, None)
        for fd, stream in ((child.stdout_fd, "stdout"), (child.stderr_fd, "stderr")):
            if fd is not None:
                self.selector.register(fd, selectors.EVENT_READ, stream)

    def run(self) -> _Outcome:
        try:
            self._loop()
        finally:
            for key in list(self.selector.get_map().values()):
                if key.data is not None:
                    self._close_pipe(key.fd, key.data)
            self.selector.close()
            # Anything still in the group outlived the child: it is part of the job, and the
            # next job (or the shell) must not inherit it.
            self.child.kill_leftovers()
        return _Outcome(returncode=self.child.returncode, reason=self.reason, tail=self.tail.text())

    def _pipes_open(self) -> bool:
        return any(key.data is not None for key in self.selector.get_map().values())

    def _loop(self) -> None:
        while True:
            exited = self.child.poll() is not None
            if exited and not self._pipes_open():
                return
            now = time.monotonic()
            if exited and self.kill_at is None:
                # A background process may hold the pipes: wait at most --grace for EOF.
                self.kill_at = now + self.opts.grace
            self._check_deadlines(now, exited)
            if exited and not self._pipes_open():
                return  # the pipes were just abandoned
            wake = now + TICK_SECONDS
            if not exited and self.kill_at is None:
                wake = min(wake, self.timeout_at)
            if not exited and self._lease_watched():
                assert self.lease is not None
                wake = min(wake, self.lease.deadline)
            if self.kill_at is not None and not self.killed:
                wake = min(wake, self.kill_at)
            for key, _ in self.selector.select(max(0.0, wake - time.monotonic())):
                if key.data is None:
                    self._handle_events()
                else:
                    self._pump(key.fd, key.data)

    def _lease_watched(self) -> bool:
        return self.lease is not None and not self.lease_lost and self.sup._verdict is None

    def _check_deadlines(self, now: float, exited: bool) -> None:
        if not exited and self.kill_at is None and now >= self.timeout_at:
            self.sup._log.warn(f"timed out after {format_duration(self.opts.timeout)}: stopping")
            self._stop("timeout", self.opts.stop_signal)
        # Once the child has exited its result is known: the report (fenced by the claim id)
        # decides whether the lease still holds, so the local deadline only matters before.
        if not exited and self._lease_watched():
            assert self.lease is not None
            if now >= self.lease.deadline:
                self.sup._verdict = (
                    Beat.LEASE_LOST,
                    "no successful heartbeat before the local lease deadline",
                )
                self._lease_lost()
        if self.kill_at is not None and now >= self.kill_at:
            if not self.killed:
                self.killed = True
                if not exited:
                    self.sup._log.warn(
                        f"still running {format_duration(self.opts.grace)} after the stop "
                        "signal: SIGKILL"
                    )
                self.child.signal_group(signal.SIGKILL)
            if exited:
                self._abandon_pipes()

    def _handle_events(self) -> None:
        for event in self.events.drain():
            if isinstance(event, SignalReceived):
                self._on_signal(event.signum)
            elif isinstance(event, _Verdict):
                verdict = self.sup._note_verdict(event)
                if verdict is Beat.CANCELLED:
                    self._stop("cancelled", self.opts.stop_signal)
                elif verdict is Beat.LEASE_LOST:
                    self._lease_lost()

    def _lease_lost(self) -> None:
        self.lease_lost = True
        self._stop_heartbeats()
        if self.opts.on_lease_lost == "stop":
            self._stop("lease_lost", self.opts.stop_signal)
        else:
            self.sup._log.warn(
                "lease lost: letting the child finish (--on-lease-lost "
                "continue); its result will not be reported"
            )
            if self.reason is None:
                self.reason = "lease_lost"

    def _stop_heartbeats(self) -> None:
        hb = self.sup._heartbeater
        if hb is not None:
            hb.stop(0)

    def _on_signal(self, signum: signal.Signals) -> None:
        action = self.sup.classify(signum)
        if action == "drain":
            self.sup._log.info(f"{signum.name}: draining: the current job finishes, then exit")
        elif action == "interrupt":
            self.sup._log.warn(f"{signum.name}: stopping the job")
            self._stop("interrupted", signum)
        elif action == "kill":
            self.sup._log.warn(f"{signum.name} again: SIGKILL")
            self.killed = True
            self.child.signal_group(signal.SIGKILL)
        else:
            self.child.signal_group(signum)

    def _stop(self, reason: str, signum: int) -> None:
        """Ask the child to stop: reason file, signal to the group, SIGKILL after --grace."""
        if self.reason is None or (self.reason == "lease_lost" and reason != "lease_lost"):
            self.reason = reason
            with contextlib.suppress(OSError):
                self.files.write_stop_reason(reason)
        self.child.signal_group(signum)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.opts.grace

    def _pump(self, fd: int, stream: str) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            self._close_pipe(fd, stream)
            return
        self.tail.feed(stream, data)
        self._write_through(stream, data)

    def _write_through(self, stream: str, data: bytes) -> None:
        target = self.passthrough.get(stream)
        if target is None:
            return
        view = memoryview(data)
        while view:
            try:
                written = os.write(target, view)
            except BlockingIOError:
                select.select([], [target], [], TICK_SECONDS)
                continue
            except OSError as exc:
                # Our own stdout/stderr went away (closed pipe): keep the tail, drop the copy.
                self.sup._log.debug(f"cannot pass {stream} through: {exc}")
                del self.passthrough[stream]
                return
            view = view[written:]

    def _abandon_pipes(self) -> None:
        """Read what is already buffered, then stop reading: someone escaped the group."""
        for key in list(self.selector.get_map().values()):
            if key.data is None:
                continue
            while select.select([key.fd], [], [], 0)[0]:
                try:
                    data = os.read(key.fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.tail.feed(key.data, data)
                self._write_through(key.data, data)
            self._close_pipe(key.fd, key.data)

    def _close_pipe(self, fd: int, stream: str) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
        self.tail.close(stream)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
